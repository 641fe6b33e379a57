// Package faults is scadad's Jepsen-style fault-testing suite: real scadad
// processes, each in a Linux network namespace of its own, under real
// faults (tc BPF link cuts and packet loss, SIGKILL, SIGSTOP, restarts),
// with workloads running throughout and checkers reading the history
// afterwards.
//
// It owns: the namespaces, bridge and links it creates (all under a
// per-run name prefix, removed on exit and, if a run died, on the next
// start); the nemesis schedule (seeded, replayable with -seed); the
// workloads (store-and-forward enqueues, deploy-pointer compare-and-set,
// role samples); the checkers (lost and duplicated messages, porcupine
// linearizability of the deploy pointer, dual-active intervals, failover
// times); and the JSON report, human summary and SVG timeline.
//
// It must not: touch the root network namespace beyond creating and
// deleting its own namespaces (no routes, no firewall rules, no bridge in
// the root namespace), send a packet that could leave the machine, or
// change product code to make a check pass. When it cannot create
// namespaces (not root, no ip), it falls back to a loopback mode that says
// loudly what it cannot do.
//
// See README.md here and docs/faults.md for the command lines.
package faults
