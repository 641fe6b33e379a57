//go:build unix

// Package testcluster starts real scadad processes on loopback for the
// integration tests and the benchmarks: it builds the binaries, makes a
// site CA, writes node configs with free ports, and starts, SIGKILLs and
// restarts nodes. It also runs the receivers a target test needs, each a
// server of the test's own on a loopback port: the sink, Mosquitto,
// PostgreSQL, and TimescaleDB (built into PGlite and run by Node from
// timescale/, whose packages .ci/run installs from its lock file).
//
// It is test infrastructure: nothing in the product imports it. It talks
// only to 127.0.0.1 and removes what it creates.
package testcluster
