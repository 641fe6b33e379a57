// Package deploy moves site configurations through the cluster.
//
// A Pusher (run on the leader) validates an artifact, stores it chunked and
// SHA-256 addressed in the FSM and moves the deployment pointer by
// compare-and-set. An Applier (run on every node) watches the pointer, loads
// and verifies the artifact from the node's own replicated copy, hands a
// validated configuration to a siteconfig.Holder, and records its applied
// revision and result in the FSM.
//
// An artifact a node cannot read, verify or validate is no answer, never an
// empty configuration: the Applier keeps the last known good configuration,
// reports "failed" with the reason, and retries; Metrics shows where the
// node stands (running and deployed revision, apply failing) to
// Prometheus. A Pusher's Check lets the daemon refuse a site config that is
// valid on its own but wrong for this cluster. This package must not talk
// to workers directly (they watch the Holder) or reach the network except
// through the Proposer it is given.
package deploy
