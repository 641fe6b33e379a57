//go:build unix

// Package testcluster starts real scadad processes on loopback for the
// integration tests and the benchmarks: it builds the binaries, makes a
// site CA, writes node configs with free ports, and starts, SIGKILLs and
// restarts nodes.
//
// It is test infrastructure: nothing in the product imports it. It talks
// only to 127.0.0.1 and removes what it creates.
package testcluster
