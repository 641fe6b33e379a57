// Command scadad is the site daemon: one per VM, plus an optional witness.
//
// It reads its node config (or, with --dev, makes a one-node site with its
// own certificates under a data folder), opens the replicated state machine,
// joins the Raft cluster and wires the workers to the role stream: only the
// Active node delivers store-and-forward messages, subscribes to the gateway
// and accepts device writes. It serves the control API (gRPC, mutual TLS),
// /health/ready, /health/active, /metrics and the local enqueue endpoint.
//
// It owns wiring only; every behaviour lives in a package of its own.
package main
