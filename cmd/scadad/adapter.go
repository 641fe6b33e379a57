package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/raft"

	"github.com/scadad/scadad/raftnode"
	"github.com/scadad/scadad/role"
)

// snapshotRestorer installs an operator's snapshot through Raft's user
// restore, which replicates it to every member.
type snapshotRestorer struct{ node *raftnode.Node }

func (s snapshotRestorer) RestoreSnapshot(ctx context.Context, appliedIndex uint64, size int64, r io.Reader) error {
	rf := s.node.Raft()
	if rf == nil {
		return fmt.Errorf("restore: raft is not running")
	}
	// Raft places the snapshot above both its own last index and the one
	// given here, so the FSM's recorded applied index stays below every
	// entry that follows.
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: appliedIndex, Term: 1, Size: size}
	timeout := 5 * time.Minute
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if err := rf.Restore(meta, r, timeout); err != nil {
		return fmt.Errorf("restore snapshot through raft: %w", err)
	}
	return nil
}

// freshRoles is the role stream as the side effects see it: the Active
// role counts only while a quorum has confirmed the leadership within
// window. A leader that wakes from a freeze (SIGSTOP, a stalled VM) still
// believes it leads until raft hears of the newer term; through this view
// it delivers nothing, accepts no device write and does not answer
// /health/active with 200 in that gap.
type freshRoles struct {
	role.Source
	node   *raftnode.Node
	window time.Duration
}

func (f freshRoles) Current() role.State {
	st := f.Source.Current()
	if st.Role == role.Active && !f.node.ActiveFresh(f.window) {
		st.Role = role.Detached
	}
	return st
}
