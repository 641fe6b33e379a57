package raftnode

import (
	"io"
	"testing"

	"github.com/hashicorp/raft"
)

type countingSnapshot struct{ released *int }

func (c countingSnapshot) Persist(raft.SnapshotSink) error { return nil }
func (c countingSnapshot) Release()                        { *c.released++ }

type snapFSM struct {
	testFSM
	released *int
}

func (f *snapFSM) Snapshot() (raft.FSMSnapshot, error) { return countingSnapshot{f.released}, nil }
func (f *snapFSM) Restore(io.ReadCloser) error         { return nil }

func TestRecoveryFSMReleasesItsSnapshotOnce(t *testing.T) {
	released := 0
	s, err := recoveryFSM{FSM: &snapFSM{released: &released}}.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Persist(nil); err != nil {
		t.Fatal(err)
	}
	s.Release()
	if released != 1 {
		t.Fatalf("released %d times, want exactly once (RecoverCluster never releases it)", released)
	}
}
