// Package sim is an in-process simulator of the MxAccess gateway, faithful to
// what made the 2026-08-26 subscribe storm: one single-threaded command
// apartment that runs commands one at a time, a cost per command and per tag,
// a per-session command deadline answered with DEADLINE_EXCEEDED (while the
// abandoned command still occupies the apartment later, as the real STA
// does), old and new capability sets, values that change, and fault
// injection (wedge, dropped replies, restart), and alarms: raised, cleared
// and acknowledged through the admin API or a scripted schedule, streamed to
// subscribed sessions, acknowledged by clients with the fencing epoch. It counts what tests and the
// storm benchmark assert on.
//
// Each tag sends values of the type its site config attribute declares
// (Config.Kinds, KindsOf); a tag of no known type sends Doubles.
//
// It serves tests, benchmarks and the demo (cmd/mxgw-sim, and scadad --dev,
// which embeds it as the demo site's gateway). It must not be imported by
// production code paths of scadad.
package sim
