package raftnode

import (
	"sync"

	"github.com/hashicorp/raft"
)

// Snapshot wraps the FSM's snapshot for raft.RecoverCluster, which persists
// it but never calls Release (hashicorp/raft v1.7.3 api.go). For the bbolt
// FSM an unreleased snapshot is a read transaction held for the life of the
// process: its pages are never reused and the next Restore (a snapshot from
// a leader, a heal's reset) waits for it forever.
func (f recoveryFSM) Snapshot() (raft.FSMSnapshot, error) {
	s, err := f.FSM.Snapshot()
	if err != nil {
		return nil, err
	}
	return &releaseAfterPersist{FSMSnapshot: s}, nil
}

type releaseAfterPersist struct {
	raft.FSMSnapshot
	once sync.Once
}

func (s *releaseAfterPersist) Persist(sink raft.SnapshotSink) error {
	defer s.Release()
	return s.FSMSnapshot.Persist(sink)
}

func (s *releaseAfterPersist) Release() { s.once.Do(s.FSMSnapshot.Release) }
