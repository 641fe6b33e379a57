// Command storm reproduces the 2026-08-26 subscribe storm against the gateway
// simulator and measures it for the legacy client (fixed 5 s retry armed on
// send, no in-flight guard, AddItemBulk + per-item AdviseSupervisory against
// an incident-era gateway) and for scadad (package subscribe's guarded,
// backed-off, coalesced workers; one supervisory SubscribeBulk against a
// gateway that advertises it). Optionally also scadad against the old
// gateway (Lever 1 alone, legacy fan-out).
//
//	go run ./bench/storm -timescale 0.1
//
// All durations scale by -timescale; the report gives figures in scale-1
// (real incident) seconds and says which scale produced them. It is a
// benchmark program, not a library: nothing imports it.
package main
