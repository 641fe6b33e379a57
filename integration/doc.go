// Package integration holds the multi-process tests: real scadad processes
// on loopback with real TLS and real bbolt files, crashed with SIGKILL.
//
// The tests build the binaries once (TestMain) and start each node as its
// own process. Nothing here is imported by the product.
package integration
