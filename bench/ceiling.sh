#!/usr/bin/env bash
# ceiling.sh: how far the 64-producer enqueue rate could rise if the
# store's work cost nothing, beside etcd's in the same sitting. Each round
# runs etcd (etcdbench as shipped, 64 clients), then, over unary gRPC and
# over HTTP (net/http, http.insecure), 64 producers against:
#
#   base         this working tree as it is
#   fsm-skip     the same with bench/ceiling-experiment.patch, CEILING_FSM=skip:
#                the state machine answers every message as added without
#                looking its id up or storing it (nothing is kept: the rate
#                is a ceiling for any work on the state machine's enqueue)
#   fsm-skip+nosync   and CEILING_WAL=nosync: the raft log is never synced
#                (the ceiling with both durable steps gone)
#
#   bench/ceiling.sh [ROUNDS] [DURATION]     (default 3 rounds of 10s)
#
# Run from the repository root with no other load on the machine. The
# experiment build is a copy of the tracked files with the patch applied;
# the patch never lands in main. Each line is a run; the ratios to the
# round's etcd follow.
set -euo pipefail

rounds=${1:-3} duration=${2:-10s}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir "$out/exp"
git ls-files -z | xargs -0 cp --parents -t "$out/exp"
patch -s -d "$out/exp" -p1 <bench/ceiling-experiment.patch
go build -o "$out/scadabench" ./bench/scadabench
(cd "$out/exp" && go build -o "$out/scadabench-exp" ./bench/scadabench)
cp -r "${ETCDBENCH_DIR:-../shared/tools/etcdbench}" "$out/etcdsrc"
chmod -R u+w "$out/etcdsrc"
(cd "$out/etcdsrc" && go build -o "$out/etcdbench" .)
run() { # round label api env...
	local round=$1 label=$2 api=$3
	shift 3
	local flags="-api grpc"
	[ "$api" = http ] && flags="-api http -http-auth insecure -http-client transport"
	local dir=$PWD bin=$out/scadabench
	[ "$label" != base ] && dir=$out/exp bin=$out/scadabench-exp
	echo "== round $round $label $api $(date +%T)"
	(cd "$dir" && env "$@" "$bin" -clients 64 -duration "$duration" -phases write $flags | grep '^write')
}
for i in $(seq 1 "$rounds"); do
	echo "== round $i etcd - $(date +%T)"
	(cd "$out/etcdsrc" && "$out/etcdbench" -value-size 256 -clients 64 -duration "$duration" -phases write | grep '^write')
	for api in grpc http; do
		run "$i" base "$api" CEILING_NONE=1
		run "$i" fsm-skip "$api" CEILING_FSM=skip
		run "$i" fsm-skip+nosync "$api" CEILING_FSM=skip CEILING_WAL=nosync
	done
done | tee "$out/ceiling.txt"
echo "== ratios to the round's etcd (64 clients)"
awk '/^== round/ { round = $3; label = $4 " " $5; next }
/^write clients=64/ { for (i = 1; i <= NF; i++) if ($i ~ /^(puts|enqueues)\/s$/) rate = $(i - 1)
	if (label == "etcd -") { peer[round] = rate; next }
	if (!(label in seen)) { seen[label] = 1; order[++n] = label }
	line[label] = line[label] sprintf("%s%.2f×", line[label] == "" ? "" : ", ", rate / peer[round])
	sum[label] += rate; psum[label] += peer[round] }
END { for (k = 1; k <= n; k++) printf "%-24s %-28s sitting %.2f×\n", order[k], line[order[k]], sum[order[k]] / psum[order[k]] }' "$out/ceiling.txt"
