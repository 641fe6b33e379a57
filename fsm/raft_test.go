package fsm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/scadad/scadad/fsm/fsmpb"
)

// TestReadersNeverSeeHalfARestore reads continuously while Restore swaps
// the file: every read sees the old state or the new, never an error or a
// mix. Run with -race.
func TestReadersNeverSeeHalfARestore(t *testing.T) {
	logs := randomLog(t, 41, 400)
	src := openTestFSM(t)
	applyInBatches(t, src, logs, rand.New(rand.NewPCG(1, 1)))
	var snap bytes.Buffer
	if _, err := src.Backup(&snap); err != nil {
		t.Fatal(err)
	}
	newState := digest(t, src)

	dst := openTestFSM(t)
	applyInBatches(t, dst, logs[:100], rand.New(rand.NewPCG(1, 1)))
	oldState := digest(t, dst)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	var reads atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				d, err := dst.Digest()
				if err != nil {
					errs <- err
					return
				}
				if d != oldState && d != newState {
					errs <- errors.New("reader saw a state that is neither old nor new")
					return
				}
				if _, err := dst.SFPending("historian", 0, 10); err != nil {
					errs <- err
					return
				}
				reads.Add(1)
			}
		}()
	}
	// Let the readers get going before the swap.
	deadline := time.Now().Add(10 * time.Second)
	for reads.Load() < 10 && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	if err := dst.Restore(io.NopCloser(bytes.NewReader(snap.Bytes()))); err != nil {
		t.Fatal(err)
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if reads.Load() < 10 {
		t.Fatalf("readers only managed %d reads", reads.Load())
	}
	if digest(t, dst) != newState {
		t.Fatal("restore did not land")
	}
}

// TestUnderRaft runs the FSM under a real single-node hashicorp/raft:
// responses come back as *Result through ApplyFuture, snapshots go through
// raft's snapshot store and restore into a fresh FSM.
func TestUnderRaft(t *testing.T) {
	f := openTestFSM(t)
	conf := raft.DefaultConfig()
	conf.LocalID = "n1"
	conf.Logger = hclog.NewNullLogger()
	conf.HeartbeatTimeout = 50 * time.Millisecond
	conf.ElectionTimeout = 50 * time.Millisecond
	conf.LeaderLeaseTimeout = 50 * time.Millisecond
	conf.BatchApplyCh = true
	store := raft.NewInmemStore()
	snaps := raft.NewInmemSnapshotStore()
	addr, trans := raft.NewInmemTransport("n1")
	r, err := raft.NewRaft(conf, f, store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown()
	if err := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: addr}}}).Error(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.LeaderCh():
	case <-time.After(10 * time.Second):
		t.Fatal("no leader")
	}

	apply := func(c *fsmpb.Command) *Result {
		t.Helper()
		c.StampUnixNano, c.Actor = time.Now().UnixNano(), "raft-test"
		data, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		fut := r.Apply(data, 5*time.Second)
		if err := fut.Error(); err != nil {
			t.Fatal(err)
		}
		res, ok := fut.Response().(*Result)
		if !ok {
			t.Fatalf("response %T", fut.Response())
		}
		return res
	}
	futures := make([]raft.ApplyFuture, 0, 50)
	for i := range 50 {
		data, _ := Encode(&fsmpb.Command{StampUnixNano: 1, Body: &fsmpb.Command_SfEnqueue{SfEnqueue: &fsmpb.SFEnqueue{
			Messages: []*fsmpb.Message{msg(string(rune('a'+i%26))+string(rune('a'+i/26)), "A", "x")}}}})
		futures = append(futures, r.Apply(data, 5*time.Second))
	}
	for _, fut := range futures {
		if err := fut.Error(); err != nil {
			t.Fatal(err)
		}
		if res := fut.Response().(*Result); res.Err != nil || res.Enqueue.Added != 1 {
			t.Fatalf("enqueue via raft: %+v", res)
		}
	}
	refused := apply(deploy("site", 0, shaOf([]byte("nope")), "", 0))
	if !errors.Is(refused.Err, ErrArtifactNotCommitted) {
		t.Fatalf("refusal via raft: %v", refused.Err)
	}
	if err := r.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if got := pendingIDs(t, f, "A"); len(got) != 50 {
		t.Fatalf("%d pending", len(got))
	}
	// Barrier and no-op entries never reach an FSM, so the FSM's index is
	// its last command's, at or below raft's.
	if got := f.Meta().AppliedIndex; got != refused.Index || got > r.AppliedIndex() {
		t.Fatalf("fsm applied %d, last command %d, raft %d", got, refused.Index, r.AppliedIndex())
	}

	if err := r.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	list, err := snaps.List()
	if err != nil || len(list) != 1 {
		t.Fatalf("snapshots %v %v", list, err)
	}
	meta, rc, err := snaps.Open(list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	fresh := openTestFSM(t)
	if err := fresh.Restore(rc); err != nil {
		t.Fatal(err)
	}
	if got := fresh.Meta().AppliedIndex; got != f.Meta().AppliedIndex || got > meta.Index {
		t.Fatalf("restored applied index %d, source %d, raft snapshot index %d", got, f.Meta().AppliedIndex, meta.Index)
	}
	if digest(t, fresh) != digest(t, f) {
		t.Fatal("raft snapshot restores a different state")
	}
}
