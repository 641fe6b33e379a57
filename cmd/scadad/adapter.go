package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/raft"

	"github.com/scadad/scadad/raftnode"
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
