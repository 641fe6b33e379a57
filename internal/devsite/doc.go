// Package devsite is the demo site `scadad --dev` runs on its embedded
// default: the loopback port layout of a one- or three-node site, the
// nodes' certificates and configs under one folder, the demo site config
// (moving tags of every type, a history rule, an OPC UA endpoint) and the
// recording sink that stands for the upstream system.
//
// It owns only what the demo needs to exist; the wiring (starting the
// nodes, the gateway simulator, the sink, deploying) is cmd/scadad's. No
// production code path may import it.
package devsite
