// Package gateway owns scadad's side of the MxAccess gateway: the gRPC client
// that opens a session, negotiates capabilities, subscribes tags (one
// supervisory SubscribeBulk where the gateway offers it, the legacy AddItemBulk
// plus per-item AdviseSupervisory fan-out where it does not), receives data
// changes, writes tags with the fencing epoch attached, subscribes alarm
// sources and receives their transitions on the active-alarm stream,
// acknowledges alarms with the epoch attached (both only where the gateway
// advertises the capability), and reconnects with backoff. The contract itself is in gatewaypb; a faithful simulator of the
// gateway is in gateway/sim.
//
// It must not decide when or how often to subscribe: retry, in-flight
// guarding and coalescing belong to package subscribe. It must not decide
// whether a write is allowed: the write gate belongs to the OPC UA server. It
// only stamps the epoch it is given.
package gateway
