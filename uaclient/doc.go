// Package uaclient reads site attributes from upstream OPC UA servers: the
// site connections of kind opcua. Each connection is one client session
// with one subscription and a monitored item per attribute; every value
// and quality goes to a Sink (the one the gateway subscribe workers feed,
// so the OPC UA address space and history forwarding see no difference),
// and a device write the caller has allowed is forwarded as an OPC UA
// Write.
//
// Sessions run only while the role allows (Active, or also Standby in
// hot-standby mode), like the gateway workers. A session that fails or
// falls silent marks its attributes Bad and is opened again after an
// exponential backoff with jitter between the connection's floor and max;
// a new configuration restarts only the connections that changed.
//
// It decides nothing about writes: the OPC UA server's write gate checks
// the role and the attribute before Write is called, and an upstream OPC
// UA server has no fencing epoch to stamp.
package uaclient
