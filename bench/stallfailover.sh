#!/usr/bin/env bash
# stallfailover.sh: failover at equal stall tolerance, etcd and scadad in
# alternating rounds of one sitting. Each round runs, on each system, a
# stall phase (K SIGSTOPs of the leader for STALL, each followed by
# SIGCONT: did the cluster ride it out, same leader in the same term?) and
# then the failover phase (K SIGKILLs of the leader -> first acknowledged
# write through the survivors), both with the timings given, which should
# be the shortest that ride out STALL on that system.
#
#   bench/stallfailover.sh STALL ROUNDS K "ETCD_FLAGS" "SCADABENCH_FLAGS"
#   bench/stallfailover.sh 300ms 2 10 "-heartbeat-ms 50 -election-ms 350" \
#       "-heartbeat-ms 400 -election-ms 400 -node-config 'cluster: {leader_lease_timeout: 350ms}'"
#
# etcdbench has no stall phase: it is copied from ../shared/tools/etcdbench
# and bench/etcdbench-stall.patch (SIGSTOP/SIGCONT of the leader's member
# process, raft term before and after) is applied to the copy (ETCDBENCH_DIR
# names the tool's folder when the repository is not beside shared/); its write
# and failover code is untouched. Run from the repository root.
set -euo pipefail

stall=$1 rounds=$2 k=$3 etcdflags=$4 scadaflags=$5
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
go build -o "$out/scadabench" ./bench/scadabench
cp -r "${ETCDBENCH_DIR:-../shared/tools/etcdbench}" "$out/etcdsrc"
chmod -R u+w "$out/etcdsrc"
patch -s -d "$out/etcdsrc" -p1 <bench/etcdbench-stall.patch
(cd "$out/etcdsrc" && go build -o "$out/etcdbench" .)
for i in $(seq 1 "$rounds"); do
	echo "== round $i etcd $(date +%T) $etcdflags"
	(cd "$out/etcdsrc" && eval "\"$out/etcdbench\" -phases stall,failover -stall $stall -failovers $k -settle 1s $etcdflags" | grep -E '^(stall|failover)')
	echo "== round $i scadad $(date +%T) $scadaflags"
	eval "\"$out/scadabench\" -phases stall,failover -stall $stall -failovers $k -settle 1s $scadaflags" | grep -E '^(stall|failover)'
done
