// Command sfsink is a recording HTTP sink for store-and-forward tests and
// benchmarks: it accepts deliveries on any path, answers them (optionally
// failing some on purpose) and appends one JSON line per request to a record
// file, so a checker can compare what was enqueued with what arrived.
//
//	sfsink -listen 127.0.0.1:0 -record FILE [-fail-first N] [-fail-rate p]
//	       [-delay d] [-status code] [-seed n]
//
// The first line on standard output is the bound address (host:port); logs
// go to standard error. A request is answered only after its record line is
// on disk (fsync, batched across concurrent requests), so an acknowledged
// delivery is never missing from the record, even if the sink is killed.
// A killed sink may leave records of requests it never answered: checkers
// must read the "status" field, not assume every line was acknowledged.
//
// Failing: the first -fail-first requests, and then each request with
// probability -fail-rate, are answered with -status (default 503). The
// control endpoint switches failing on and off at run time:
//
//	POST /control?fail=true      fail every request until fail=false
//	POST /control?fail=false     back to -fail-first/-fail-rate behaviour
//	POST /control?delay=250ms    change the answer delay
//	GET  /control                current settings and counters as JSON
//
// It owns nothing of scadad's; it must not import scadad packages, so it
// stays a faithful external receiver.
package main
