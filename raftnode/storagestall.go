package raftnode

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/scadad/scadad/internal/clock"
)

// ErrStorageStalled: a write to this node's raft log, or an apply or a
// snapshot of its state machine, has not returned for longer than the
// caller's limit (a disk that stopped answering). Nothing in raft ends
// that on a leader: its replication goroutines go on sending heartbeats,
// so no other node is elected, while it commits nothing (a commit waits
// for the leader's own copy, see parallelLog) or applies nothing; and
// hashicorp/raft's leader loop, which answers VerifyLeader and checks the
// leader lease, waits for room in the state machine's queue of 128
// batches. The daemon stops the process for the service manager to
// restart; the other voter is elected once the heartbeats stop.
var ErrStorageStalled = errors.New("this node's storage has stopped answering")

// storageWatch records the storage operation in progress of one kind
// (raft log writes, state machine applies, its snapshots), for
// StorageStalled.
type storageWatch struct {
	clock clock.Clock
	since atomic.Int64  // unix nanoseconds the current operation began; 0 when none runs
	index atomic.Uint64 // the last raft index it covers
}

// begin records an operation covering entries up to last. A nil watch
// records nothing.
func (w *storageWatch) begin(last uint64) {
	if w == nil {
		return
	}
	w.index.Store(last)
	w.since.Store(w.clock.Now().UnixNano())
}

func (w *storageWatch) end() {
	if w != nil {
		w.since.Store(0)
	}
}

// overdue is how long the operation in progress has run beyond limit, and
// its index; ok false when none has.
func (w *storageWatch) overdue(limit time.Duration) (age time.Duration, index uint64, ok bool) {
	since := w.since.Load()
	if since == 0 {
		return 0, 0, false
	}
	age = w.clock.Now().Sub(time.Unix(0, since))
	return age, w.index.Load(), age > limit
}

// StorageStalled reports, wrapping ErrStorageStalled, a raft log write, a
// state machine apply or a state machine snapshot that has run longer
// than limit. Nil while they come back within limit, and when none is in
// progress.
func (n *Node) StorageStalled(limit time.Duration) error {
	if age, index, ok := n.logWriting.overdue(limit); ok {
		return fmt.Errorf("%w: the raft log write of entries up to index %d has not returned for %s (limit %s)",
			ErrStorageStalled, index, age.Round(time.Millisecond), limit)
	}
	if age, index, ok := n.applying.overdue(limit); ok {
		return fmt.Errorf("%w: the apply of entries up to index %d has not returned for %s (limit %s): the state file's disk, or the raft log's, does not answer",
			ErrStorageStalled, index, age.Round(time.Millisecond), limit)
	}
	if age, _, ok := n.snapshotting.overdue(limit); ok {
		return fmt.Errorf("%w: the state machine's snapshot (a commit of its state file) has not returned for %s (limit %s)",
			ErrStorageStalled, age.Round(time.Millisecond), limit)
	}
	return nil
}
