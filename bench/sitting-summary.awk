# sitting-summary.awk: the ratios of a bench/sitting.sh output, per round
# and over the sitting (the sum of scadad's rates over the sum of the
# peer's), for each target and each etcd peer, with p50 (1 client) and p99
# (64 clients) beside the peer's.
#
#   awk -f bench/sitting-summary.awk SITTING-OUTPUT
#
# A round missing a run is left out of that row, and said so.
/^== round/ { round = $3; sys = $4 " " $5; next }
/^write clients=/ {
	split($2, c, "=")
	n = c[2]
	rate = ""
	for (i = 1; i <= NF; i++) {
		if ($i ~ /^(puts|enqueues)\/s$/) rate = $(i - 1)
		if ($i ~ /^p50=/) { p50 = substr($i, 5); sub(/ms$/, "", p50) }
		if ($i ~ /^p99=/) { p99 = substr($i, 5); sub(/ms$/, "", p99) }
	}
	if (rate == "") next
	key = sys "|" n
	r[key, round] = rate; q50[key, round] = p50; q99[key, round] = p99
	if (round > rounds) rounds = round
}
function row(label, ours, peer,    i, sr, sp, line, ok, lat, worse, missing) {
	line = ""; sr = 0; sp = 0; worse = 0; missing = 0
	for (i = 1; i <= rounds; i++) {
		if (!((ours, i) in r) || !((peer, i) in r)) { missing++; continue }
		sr += r[ours, i]; sp += r[peer, i]
		line = line sprintf("%s%.2f×", line == "" ? "" : ", ", r[ours, i] / r[peer, i])
		lat = (ours ~ /\|1$/) ? (q50[ours, i] > q50[peer, i]) : (q99[ours, i] > q99[peer, i])
		worse += lat
	}
	if (sp == 0) return
	printf "%-48s %-28s sitting %.2f×  %s %s%s\n", label, line, sr / sp,
		(ours ~ /\|1$/) ? "p50" : "p99", worse == 0 ? "at or below the peer's in every round" : "above the peer's in " worse " round(s)",
		missing ? sprintf(" (%d round(s) without both runs)", missing) : ""
}
END {
	split("plain plain+win tls", peers, " ")
	for (p = 1; p <= 3; p++) {
		peer = "etcd " peers[p]
		printf "-- against %s\n", peer
		row("1 client, gRPC (unary SFEnqueue)", "scadad grpc|1", peer "|1")
		row("64 clients, gRPC (unary SFEnqueue)", "scadad grpc|64", peer "|64")
		row("1 client, gRPC stream (SFEnqueueStream)", "scadad stream|1", peer "|1")
		row("64 clients, gRPC stream (SFEnqueueStream)", "scadad stream|64", peer "|64")
		row("64 clients, HTTP (net/http, keep-alive)", "scadad http|64", peer "|64")
		row("64 clients, HTTPS + bearer token", "scadad https|64", peer "|64")
		row("64 clients, the gRPC call alone (floor)", "scadad floor|64", peer "|64")
		row("64 clients, the HTTP request alone (http-floor)", "scadad http-floor|64", peer "|64")
	}
}
