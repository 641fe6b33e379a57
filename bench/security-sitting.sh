#!/usr/bin/env bash
# security-sitting.sh: issue 25's enqueue benchmark in one sitting:
# alternating rounds of etcd, scadad over HTTPS with a bearer token, and
# scadad with http.insecure: true. The target: HTTPS + token ≥ 1.5×
# etcd's put/s, p99 no worse; the insecure run is the cost of TLS and the
# token. Each run: a fresh cluster, 64 clients (one connection each,
# waiting for each answer), 256 B values, 10 s after a 1 s warm-up, writes
# to the leader / Active only.
#
#   bench/security-sitting.sh [ROUNDS] [DURATION]     (default 3 10s)
#
# ETCDBENCH (default ../shared/tools/etcdbench, as bench/sitting.sh) is
# the etcd benchmark's folder.
# Run from the repository root with no other load on the machine; it
# prints the load average before each run and each run's rate line.
set -euo pipefail

rounds=${1:-3}
duration=${2:-10s}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
go build -o "$out/scadabench" ./bench/scadabench
etcdbench=${ETCDBENCH:-../shared/tools/etcdbench}
(cd "$etcdbench" && go build -o "$out/etcdbench" .)
for i in $(seq 1 "$rounds"); do
	echo "== round $i etcd $(date -u +%T) $(uptime | sed 's/.*load average/load average/')"
	(cd "$etcdbench" && "$out/etcdbench" -value-size 256 -clients 64 -duration "$duration" -phases write | grep '^write')
	for auth in token insecure; do
		echo "== round $i scadad http-auth=$auth $(date -u +%T) $(uptime | sed 's/.*load average/load average/')"
		"$out/scadabench" -clients 64 -value-size 256 -duration "$duration" -phases write -api http -http-auth "$auth" -http-client transport | grep '^write'
	done
done
