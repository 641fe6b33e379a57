// Package control serves the scadad control API (gRPC under mutual TLS) and
// carries writes to the leader.
//
// It owns the request handling of every control RPC, the forwarding of
// writes from a follower to the leader (Forwarder), and the Proposer that
// the workers use to commit FSM commands from any node (SeenLocally, for
// operator commands, also waits until this node's own state shows them),
// and the store-and-forward side of the API (SFService: enqueue, counts,
// operator moves mapped to controlpb and gRPC codes).
// It must not decide anything the FSM or Raft decides: it translates
// requests into commands and verdicts into gRPC status codes, nothing more.
package control
