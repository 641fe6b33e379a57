#!/usr/bin/env bash
# pgo.sh: refreshes cmd/scadad/default.pgo, the CPU profile that every
# `go build` of scadad compiles with (profile-guided optimization: Go's
# default -pgo=auto reads a main package's default.pgo). The profile is
# the merge of every node's CPU profile (leader, voter and witness) under
# the hot workloads: 64 producers over unary gRPC, the gRPC stream, HTTP
# and HTTPS with a token, one producer over unary gRPC, and delivery to a
# local target.
#
#   bench/pgo.sh            (about 3 minutes)
#
# Run from the repository root with no other load on the machine, after a
# change to the write or delivery path; commit the new profile with the
# A/B that shows it (docs/performance.md, Profile-guided build). A stale
# profile is safe: Go uses what still matches and ignores the rest.
set -euo pipefail

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
go build -o "$out/scadabench" ./bench/scadabench
run() {
	local name=$1
	shift
	mkdir -p "$out/$name"
	echo "== $name: scadabench $*"
	"$out/scadabench" -cpuprofile "$out/$name" "$@" | grep -E '^(write|deliver)'
}
run grpc64 -clients 64 -duration 15s -phases write -api grpc
run stream64 -clients 64 -duration 15s -phases write -api stream
run http64 -clients 64 -duration 15s -phases write -api http
run https64 -clients 64 -duration 10s -phases write -api http -http-auth token
run grpc1 -clients 1 -duration 10s -phases write -api grpc
run deliver -clients 64 -duration 5s -phases deliver -deliver-messages 40000
go tool pprof -proto "$out"/*/*.pprof >"$out/merged.pgo"
mv "$out/merged.pgo" cmd/scadad/default.pgo
echo "cmd/scadad/default.pgo: $(wc -c <cmd/scadad/default.pgo) bytes from $(ls "$out"/*/*.pprof | wc -l) profiles"
