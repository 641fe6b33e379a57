package raftnode

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/clock/clocktest"
	"github.com/scadad/scadad/internal/testwait"
)

// A leader whose state machine stops answering is reported by
// StorageStalled; nothing in raft ends that state (the leader keeps
// heartbeating, so no one else is elected, and it can neither confirm its
// leadership nor commit), so the daemon stops on it. The other nodes,
// whose state machines answer, report nothing, and the report clears once
// the apply returns.
func TestStorageStalledReportsAStateMachineThatStoppedAnswering(t *testing.T) {
	t.Parallel()
	h, leader := threeNodes(t)
	for _, id := range []string{"a", "b", "w"} {
		if err := h.node(id).StorageStalled(300 * time.Millisecond); err != nil {
			t.Fatalf("%s with nothing being applied: %v", id, err)
		}
	}

	release := h.holdApplies(leader)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	applied := make(chan error, 1)
	node := h.node(leader)
	go func() { _, err := node.Apply(ctx, []byte("stuck")); applied <- err }()

	var stalled error
	testwait.For(t, 10*time.Second, "the leader's stalled apply reported", func() bool {
		stalled = h.node(leader).StorageStalled(300 * time.Millisecond)
		return stalled != nil
	})
	if !errors.Is(stalled, ErrStorageStalled) {
		t.Fatalf("StorageStalled = %v, want ErrStorageStalled", stalled)
	}
	// raft still calls this node the leader, and no quorum confirms it.
	if !h.node(leader).Role().Current().Leading() {
		t.Fatal("the stalled leader stopped leading on its own; the report would not be needed")
	}
	for _, id := range []string{"a", "b", "w"} {
		if id != leader {
			if err := h.node(id).StorageStalled(300 * time.Millisecond); err != nil {
				t.Fatalf("follower %s, whose state machine answers: %v", id, err)
			}
		}
	}

	release()
	if err := <-applied; err != nil {
		t.Fatalf("the held apply, once released: %v", err)
	}
	if err := h.node(leader).StorageStalled(300 * time.Millisecond); err != nil {
		t.Fatalf("after the apply returned: %v", err)
	}
}

// A raft log write that does not return (the leader's background write or
// a follower's own) is reported once it has run past the limit, with the
// index it covers, and no longer once it returns. On a leader it holds
// every commit (a follower's answer waits for the leader's copy) while no
// apply ever starts, so watching applies alone would never see it.
func TestStorageStalledReportsALogWriteThatDoesNotReturn(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC))
	n := &Node{cfg: Config{Clock: clk}, logWriting: storageWatch{clock: clk}, applying: storageWatch{clock: clk}}
	for _, leading := range []bool{true, false} {
		store := newHeldStore()
		p, err := newParallelLog(store, func() bool { return leading }, zerolog.Nop(), &n.logWriting)
		if err != nil {
			t.Fatal(err)
		}
		release := store.hold()
		done := make(chan error, 1)
		go func() {
			done <- p.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("x")}})
		}()
		testwait.For(t, 5*time.Second, "the write at the store", func() bool { return store.waiting.Load() == 1 })
		clk.Advance(time.Second)
		if err := n.StorageStalled(time.Second); err != nil {
			t.Fatalf("leading=%v: a write 1 s old against a 1 s limit: %v", leading, err)
		}
		clk.Advance(time.Millisecond)
		err = n.StorageStalled(time.Second)
		if !errors.Is(err, ErrStorageStalled) || !strings.Contains(err.Error(), "raft log write of entries up to index 1") {
			t.Fatalf("leading=%v: a write past the limit: %v, want ErrStorageStalled naming the raft log write and index 1", leading, err)
		}
		release()
		if !leading {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		if err := p.flush(); err != nil {
			t.Fatal(err)
		}
		if err := n.StorageStalled(time.Second); err != nil {
			t.Fatalf("leading=%v: after the write returned: %v", leading, err)
		}
	}
}

// heldSnapshotFSM is a test FSM whose Snapshot waits for gate, as the real
// FSM's commit of its held write transaction waits on a disk that does
// not answer.
type heldSnapshotFSM struct {
	*testFSM
	gate chan struct{}
}

func (f heldSnapshotFSM) Snapshot() (raft.FSMSnapshot, error) {
	<-f.gate
	return f.testFSM.Snapshot()
}

// A state machine snapshot that does not return holds raft's FSM
// goroutine as a hung apply does (every apply queues behind it) while no
// apply is in progress; it is reported too.
func TestStorageStalledReportsASnapshotThatDoesNotReturn(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC))
	n := &Node{cfg: Config{Clock: clk}, logWriting: storageWatch{clock: clk}, applying: storageWatch{clock: clk}, snapshotting: storageWatch{clock: clk}}
	held := heldSnapshotFSM{testFSM: &testFSM{}, gate: make(chan struct{})}
	fsm := newDurableFSM(held, nil, fsmWatches{applying: &n.applying, snapshotting: &n.snapshotting})
	done := make(chan error, 1)
	go func() { _, err := fsm.Snapshot(); done <- err }()
	testwait.For(t, 5*time.Second, "the snapshot begun", func() bool { return n.snapshotting.since.Load() != 0 })
	clk.Advance(time.Second + time.Millisecond)
	if err := n.StorageStalled(time.Second); !errors.Is(err, ErrStorageStalled) || !strings.Contains(err.Error(), "snapshot") {
		t.Fatalf("a snapshot past the limit: %v, want ErrStorageStalled naming the snapshot", err)
	}
	close(held.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := n.StorageStalled(time.Second); err != nil {
		t.Fatalf("after the snapshot returned: %v", err)
	}
}
