// Package role defines the role a scadad node plays in its cluster and the
// fencing epoch that travels with it.
//
// It owns only the vocabulary: the Role values, the State a node publishes
// on every change, and a small broadcaster that hands the newest State to any
// number of watchers. It must not import Raft, the FSM or any worker: the
// producer (raftnode) and the consumers (storeforward, subscribe, opcua,
// cmd/scadad) all depend on it, never the other way round.
package role
