#!/usr/bin/env bash
# sitting.sh: the enqueue comparison with etcd on equal terms, alternating
# rounds of one sitting. Each round runs, 256 B values, 1 and 64 clients
# with a connection each, DURATION per run:
#
#   etcd   plain      etcdbench as shipped: clientv3 (gRPC), plaintext
#                     between members and to the clients
#   etcd   tls        the same with mutual TLS between members and from the
#                     clients (bench/etcdbench-tls.patch applied to a copy:
#                     one ECDSA P-256 CA for the run, etcd's
#                     --client-cert-auth and --peer-client-cert-auth, and
#                     HTTP on a port of its own so that gRPC is served
#                     natively, as etcd advises with TLS)
#   etcd   plain+win  etcd plain with its clients given the same fixed gRPC
#                     flow-control windows as scadad's (bench/etcdbench-
#                     window.patch, ETCDBENCH_CLIENT_WINDOW=1): the clients
#                     of both sides then differ in nothing but their API
#   scadad grpc       scadabench's unary SFEnqueue, grpc-go, mutual TLS (the
#                     only way scadad's control API serves; its nodes always
#                     talk mutual TLS to each other)
#   scadad stream     the same client over SFEnqueueStream: a stream per
#                     producer, one message in flight on it (etcd has no
#                     streaming put; its clients call unary Put)
#   scadad http       net/http Client and Transport, a keep-alive connection
#                     each, `http.insecure` (plain HTTP to the node; its
#                     nodes still mutual TLS between them)
#   scadad https      the same over HTTPS with a bearer token
#
# With SITTING_FLOORS=1 each round also runs, 64 clients, the calls alone:
#
#   scadad floor      scadad grpc's client and calls, refused before
#                     anything is stored (-api floor)
#   scadad http-floor scadad http's client and requests, refused 404 before
#                     anything is stored (-api http-floor)
#
#   bench/sitting.sh [ROUNDS] [DURATION]     (default 3 rounds of 10s)
#
# Run from the repository root with no other load on the machine
# (ETCDBENCH_DIR names etcdbench's folder when the repository is not beside
# shared/). It prints each run's rate lines, then the ratios per round and
# over the sitting (bench/sitting-summary.awk, which also reads a saved
# output).
set -euo pipefail

rounds=${1:-3} duration=${2:-10s}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
go build -o "$out/scadabench" ./bench/scadabench
cp -r "${ETCDBENCH_DIR:-../shared/tools/etcdbench}" "$out/etcdsrc"
chmod -R u+w "$out/etcdsrc"
patch -s -d "$out/etcdsrc" -p1 <bench/etcdbench-tls.patch
patch -s -d "$out/etcdsrc" -p1 <bench/etcdbench-window.patch
(cd "$out/etcdsrc" && go build -o "$out/etcdbench" .)
etcd() {
	echo "== round $1 etcd $2 $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
	(cd "$out/etcdsrc" && ETCDBENCH_CLIENT_WINDOW=${4:-} "$out/etcdbench" -value-size 256 -clients 1,64 -duration "$duration" -phases write $3 | grep '^write')
}
scadad() {
	echo "== round $1 scadad $2 $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
	"$out/scadabench" -clients "$3" -duration "$duration" -phases write $4 | grep '^write'
}
for i in $(seq 1 "$rounds"); do
	etcd "$i" plain ""
	scadad "$i" grpc 1,64 "-api grpc"
	scadad "$i" stream 1,64 "-api stream"
	etcd "$i" plain+win "" 1
	etcd "$i" tls "-tls"
	scadad "$i" http 64 "-api http -http-auth insecure -http-client transport"
	scadad "$i" https 64 "-api http -http-auth token -http-client transport"
	if [ "${SITTING_FLOORS:-}" = 1 ]; then
		scadad "$i" floor 64 "-api floor"
		scadad "$i" http-floor 64 "-api http-floor -http-auth insecure -http-client transport"
	fi
done | tee "$out/sitting.txt"
echo "== ratios (bench/sitting-summary.awk)"
awk -f bench/sitting-summary.awk "$out/sitting.txt"
