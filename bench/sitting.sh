#!/usr/bin/env bash
# sitting.sh: etcd and scadad enqueue rounds, alternating, in one sitting:
# the figures the enqueue target (≥ 2× etcd's put/s, p99 no worse) is read
# from. Each round is etcdbench then scadabench, 64 clients with a
# connection each, 256 B values, 10 s.
#
#   bench/sitting.sh [ROUNDS]     (default 6)
#
# Run from the repository root with no other load on the machine; it
# prints each run's rate line.
set -euo pipefail

rounds=${1:-6}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
go build -o "$out/scadabench" ./bench/scadabench
(cd ../shared/tools/etcdbench && go build -o "$out/etcdbench" .)
for i in $(seq 1 "$rounds"); do
	echo "== round $i etcd $(date +%T)"
	(cd ../shared/tools/etcdbench && "$out/etcdbench" -value-size 256 -clients 64 -duration 10s -phases write | grep '^write')
	echo "== round $i scadad $(date +%T)"
	"$out/scadabench" -clients 64 -duration 10s -phases write -api http -http-client conn | grep '^write'
done
