// Package siteconfig owns the site configuration: the versioned YAML schema
// (data connections, instances and their attributes, store-and-forward
// targets, tag-history forwarding rules, the OPC UA server options and the
// hot-standby flag), its strict decoding, its validation, its canonical form
// (the bytes whose SHA-256 is an artifact's identity), the difference between
// two configurations, and the Holder through which workers receive the
// current configuration and what changed.
//
// A configuration a node cannot read is no answer, never an empty
// configuration: Parse fails on empty, undecodable or invalid input, and a
// Holder only ever accepts a site that validates, so a bad artifact leaves
// the last known good configuration in place.
//
// This package must not do I/O beyond what callers hand it, know about Raft,
// the FSM or the network, start goroutines, or hold package-level mutable
// state. Node-local settings (listen addresses of the cluster, certificates,
// data directories) belong to the node config, not here.
package siteconfig
