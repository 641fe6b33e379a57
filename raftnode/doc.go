// Package raftnode owns the hashicorp/raft wiring of a scadad node: the
// raft-boltdb log and stable store, the file snapshot store, the mutual-TLS
// transport, bootstrap from the configured membership, the witness hand-off,
// the pair-mode availability override, the re-admission of a returning peer,
// and the role stream (Active / Standby / Witness / Detached) that every
// worker follows.
//
// raftnode must not: interpret commands (the FSM does), decide what an epoch
// bump records (the OnOverride callback the wirer supplies does), run any
// workload, talk plaintext, or keep package-level state. The override never
// fires while a peer is answering: any Raft traffic, inbound connection or
// successful probe handshake from a peer resets its window.
package raftnode
