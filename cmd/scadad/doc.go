// Command scadad is the site daemon: one per VM, plus an optional witness.
//
// It reads its node config (or, with --dev, runs the whole demo site of
// internal/devsite in this process: a gateway simulator, a recording sink,
// one or three nodes and the demo site config deployed), opens the replicated state machine,
// joins the Raft cluster and wires the workers to the role stream: only the
// Active node delivers store-and-forward messages, subscribes to the gateway
// and accepts device writes. It serves the control API (gRPC, mutual TLS),
// /health/ready, /health/active, /metrics and the local enqueue endpoint.
//
// It owns wiring only; every behaviour lives in a package of its own.
package main
