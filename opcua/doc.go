// Package opcua is scadad's OPC UA face: a gopcua/opcua server that shows the
// site's instances and attributes as a browsable address space with live
// values and quality, publishes the redundancy surface (Server.ServiceLevel,
// Server.ServerArray, ServerRedundancy) from the node's role and health, and
// forwards client writes to the gateway only when the write gate allows.
//
// It also owns the peer probe (can this node reach its peer's endpoint?) and
// the client-side helpers behind `scadactl opcua pick|watch`.
//
// The package owns:
//   - the pure ServiceLevel calculator (ComputeServiceLevel) and the pure
//     write gate (WriteGate);
//   - the address space (one folder per instance, one variable per attribute),
//     kept in step with deploys by difference (ApplyModel);
//   - the OPC UA Subscription and MonitoredItem services (subscriptions.go),
//     which serve clients' subscriptions to ServiceLevel and the site's tags
//     in place of gopcua's, which can deadlock, and the site's alarm
//     conditions' events (events.go, eventfilter.go);
//   - the alarm conditions of Part 9 (conditions.go, conditionnodes.go),
//     fed by the daemon from the replicated alarm state, and the Call
//     service (call.go): ConditionRefresh, and Acknowledge, Confirm and
//     AddComment forwarded to the AlarmActions the daemon passes in;
//   - the public TCP port (front.go): a connection reaches the library,
//     which listens on loopback, only with its whole Hello, so port scans
//     and silent connections cannot stop the server accepting; a library
//     instance that stops answering Hellos (a local process reset its
//     loopback port) is replaced by a new one (Server.restartLibrary);
//   - who may use the server: the client certificates trusted on secure
//     channels (trust.go: a trusted folder, refused ones copied to a
//     rejected folder), the security policies a channel may ask for (the
//     front), the identities (anonymous, user names) and which of them
//     may write; and the server's own application certificate when the
//     daemon keeps one (OwnCertificate);
//   - every defence against gopcua's server defects (see
//     WORKAROUNDS.md): hostile or malformed client requests get Bad statuses,
//     never a crash.
//
// It must not: decide the role (it follows a RoleSource), talk to the
// gateway itself (it calls the Writer the daemon passes in), read YAML (the
// daemon maps it to Config), touch Raft or the FSM, or register metrics on
// the global Prometheus registry.
package opcua
