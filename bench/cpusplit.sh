#!/usr/bin/env bash
# cpusplit.sh: CPU used by each process of a write benchmark, sampled from
# /proc/PID/stat over 5 s in the middle of the run (start it with a
# -duration of 20s or more).
#
#   bench/cpusplit.sh scadabench -clients 64 -duration 20s -phases write [-api http]
#   bench/cpusplit.sh etcdbench  -value-size 256 -clients 64 -duration 20s -phases write
#
# Run from the repository root with no other load on the machine. Prints the
# benchmark's rate line, cores per process (the benchmark's own clients and
# each member) and the machine's idle share over the same 5 s.
set -euo pipefail

tool=${1:?usage: cpusplit.sh scadabench|etcdbench ARGS...}
shift
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

case $tool in
scadabench)
	go build -o "$out/bench" ./bench/scadabench
	members='scadad.*node.yaml'
	;;
etcdbench)
	(cd ../shared/tools/etcdbench && go build -o "$out/bench" .)
	members='bench member'
	;;
*)
	echo "cpusplit.sh: unknown benchmark $tool (want scadabench or etcdbench)" >&2
	exit 2
	;;
esac

"$out/bench" "$@" >"$out/run.log" 2>&1 &
bench=$!
for _ in $(seq 240); do
	[ "$(pgrep -f "$members" | wc -l)" -ge 3 ] && break
	sleep 0.5
done
sleep 9 # cluster set-up and the benchmark's warm-up

# name: the member's id or "clients" for the benchmark process itself.
snap() {
	for p in $bench $(pgrep -f "$members"); do
		local name
		name=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -o 'node-[a-z]*\|witness\|-name m[0-9]' | head -1 | sed 's/^-name //' || true)
		[ "$p" = "$bench" ] && name=clients
		echo "$p $(cut -d' ' -f14,15 "/proc/$p/stat" 2>/dev/null || echo 0 0) ${name:-?}"
	done
}
snap >"$out/s1"
head -1 /proc/stat >"$out/c1"
sleep 5
snap >"$out/s2"
head -1 /proc/stat >"$out/c2"
wait $bench || true

grep -o '[0-9]* \(puts\|enqueues\)/s.*p99=[0-9.]*ms' "$out/run.log" || tail -3 "$out/run.log"
hz=$(getconf CLK_TCK)
join <(sort "$out/s1") <(sort "$out/s2") | awk -v hz="$hz" '{printf "%-8s %.2f cores\n", $4, ($5+$6-$2-$3)/hz/5}'
paste "$out/c1" "$out/c2" | awk '{u=$13-$2; s=$15-$4; i=$16-$5; w=$17-$6; t=0; for (k=13; k<=NF; k++) t+=$k; for (k=2; k<=11; k++) t-=$k; printf "machine: user %.0f%% system %.0f%% idle %.0f%% iowait %.0f%%\n", 100*u/t, 100*s/t, 100*i/t, 100*w/t}'
