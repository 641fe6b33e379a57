package raftnode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/testwait"
)

// heldStore is a log store whose writes can be held (a slow fsync) or
// failed (a broken disk).
type heldStore struct {
	logStableStore
	mu      sync.Mutex
	gate    chan struct{} // writes wait for it to close while set
	fail    error
	waiting atomic.Int32 // writes waiting at the gate
	writes  atomic.Int32 // StoreLogs calls that reached the store
}

func newHeldStore() *heldStore {
	return &heldStore{logStableStore: raft.NewInmemStore()}
}

// hold makes writes wait until the returned func is called.
func (s *heldStore) hold() (release func()) {
	g := make(chan struct{})
	s.mu.Lock()
	s.gate = g
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.gate = nil
			s.mu.Unlock()
			close(g)
		})
	}
}

func (s *heldStore) failWith(err error) {
	s.mu.Lock()
	s.fail = err
	s.mu.Unlock()
}

func (s *heldStore) StoreLogs(logs []*raft.Log) error {
	s.mu.Lock()
	g, fail := s.gate, s.fail
	s.mu.Unlock()
	if g != nil {
		s.waiting.Add(1)
		<-g
		s.waiting.Add(-1)
	}
	if fail != nil {
		return fail
	}
	s.writes.Add(1)
	return s.logStableStore.StoreLogs(logs)
}

func (s *heldStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// newLeadingLog is a parallelLog over a heldStore whose node leads until
// the test says otherwise.
func newLeadingLog(t *testing.T) (*parallelLog, *heldStore, *atomic.Bool) {
	t.Helper()
	store := newHeldStore()
	leading := &atomic.Bool{}
	leading.Store(true)
	p, err := newParallelLog(store, leading.Load, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return p, store, leading
}

// awaitHeldWrite waits until a write is waiting at the store's gate.
func (s *heldStore) awaitHeldWrite(t *testing.T) {
	t.Helper()
	testwait.For(t, 5*time.Second, "the writer waiting at the store", func() bool { return s.waiting.Load() == 1 })
}

// requireStored fails unless entries 1 to last are in s.
func requireStored(t *testing.T, s raft.LogStore, last uint64, when string) {
	t.Helper()
	for i := uint64(1); i <= last; i++ {
		if !storedIn(t, s, i) {
			t.Fatalf("entry %d not in the store %s", i, when)
		}
	}
}

func entries(from, to uint64) []*raft.Log {
	var out []*raft.Log
	for i := from; i <= to; i++ {
		out = append(out, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("e%d", i))})
	}
	return out
}

func storedIn(t *testing.T, s raft.LogStore, index uint64) bool {
	t.Helper()
	var l raft.Log
	err := s.GetLog(index, &l)
	if err != nil && !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("get log %d: %v", index, err)
	}
	return err == nil
}

func TestParallelLogQueuesWhileLeadingAndServesTheQueue(t *testing.T) {
	p, store, _ := newLeadingLog(t)
	release := store.hold()
	defer release()

	if err := p.StoreLogs(entries(1, 3)); err != nil {
		t.Fatalf("queue entries 1-3: %v", err)
	}
	// Returned while the write is held: raft may replicate at once.
	var got raft.Log
	if err := p.GetLog(2, &got); err != nil || string(got.Data) != "e2" {
		t.Fatalf("queued entry 2 = %q, %v; want e2 from the queue", got.Data, err)
	}
	if last, _ := p.LastIndex(); last != 3 {
		t.Fatalf("last index %d while 1-3 are queued, want 3", last)
	}
	if first, _ := p.FirstIndex(); first != 1 {
		t.Fatalf("first index %d while 1-3 are queued on an empty store, want 1", first)
	}
	if storedIn(t, store, 1) {
		t.Fatal("entry 1 reached the store while its write was held")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.waitSynced(ctx, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waitSynced(3) while held = %v, want the deadline", err)
	}
	// More entries queue behind the held write and go out in one batch.
	store.awaitHeldWrite(t)
	if err := p.StoreLogs(entries(4, 5)); err != nil {
		t.Fatalf("queue entries 4-5: %v", err)
	}
	release()
	if err := p.waitSynced(context.Background(), 5); err != nil {
		t.Fatalf("waitSynced(5): %v", err)
	}
	requireStored(t, store, 5, "after waitSynced(5)")
	if n := store.writes.Load(); n != 2 {
		t.Fatalf("%d writes to the store for two hand-overs, the second while the first was held; want 2", n)
	}
}

func TestParallelLogFollowerWriteWaitsForTheQueue(t *testing.T) {
	p, store, leading := newLeadingLog(t)
	release := store.hold()
	defer release()
	if err := p.StoreLogs(entries(1, 2)); err != nil {
		t.Fatal(err)
	}
	store.awaitHeldWrite(t)

	// Stepped down: a follower's append must be on disk when it returns,
	// and after what the leader queued.
	leading.Store(false)
	done := make(chan error, 1)
	go func() { done <- p.StoreLogs(entries(3, 3)) }()
	select {
	case err := <-done:
		t.Fatalf("a follower's append returned (%v) while the queued entries before it were held", err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("follower append: %v", err)
	}
	requireStored(t, store, 3, "once the follower's append returned")
	if got := p.synced.Load(); got != 3 {
		t.Fatalf("synced %d, want 3", got)
	}
}

func TestParallelLogTruncatingTheQueueWritesItFirst(t *testing.T) {
	p, store, leading := newLeadingLog(t)
	if err := p.StoreLogs(entries(1, 2)); err != nil {
		t.Fatal(err)
	}
	if err := p.waitSynced(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	release := store.hold()
	if err := p.StoreLogs(entries(3, 4)); err != nil {
		t.Fatal(err)
	}
	leading.Store(false)
	done := make(chan error, 1)
	go func() { done <- p.DeleteRange(3, 4) }()
	store.awaitHeldWrite(t)
	release()
	if err := <-done; err != nil {
		t.Fatalf("truncate 3-4: %v", err)
	}
	if storedIn(t, p, 3) || storedIn(t, store, 3) {
		t.Fatal("entry 3 still readable after its truncation")
	}
	if last, _ := p.LastIndex(); last != 2 {
		t.Fatalf("last index %d after truncating 3-4, want 2", last)
	}
	if got := p.synced.Load(); got != 2 {
		t.Fatalf("synced %d after truncating 3-4, want 2", got)
	}
	// A compaction below what is synced does not wait for anything.
	if err := p.DeleteRange(1, 1); err != nil {
		t.Fatalf("compact 1: %v", err)
	}
	if first, _ := p.FirstIndex(); first != 2 {
		t.Fatalf("first index %d after compacting 1, want 2", first)
	}
}

func TestParallelLogFailedWriteIsNeverSynced(t *testing.T) {
	p, store, leading := newLeadingLog(t)
	disk := errors.New("input/output error")
	store.failWith(disk)
	if err := p.StoreLogs(entries(1, 1)); err != nil {
		t.Fatalf("queue: %v", err)
	}
	if err := p.waitSynced(context.Background(), 1); !errors.Is(err, disk) {
		t.Fatalf("waitSynced after a failed write = %v, want the disk's error", err)
	}
	if p.synced.Load() != 0 {
		t.Fatalf("synced %d after the only write failed", p.synced.Load())
	}
	store.failWith(nil)
	if err := p.StoreLogs(entries(2, 2)); !errors.Is(err, disk) {
		t.Fatalf("a write after the failure = %v, want it refused with the failure", err)
	}
	leading.Store(false)
	if err := p.StoreLogs(entries(2, 2)); !errors.Is(err, disk) {
		t.Fatalf("a follower's write after the failure = %v, want it refused with the failure", err)
	}
}

func TestParallelLogClosedEndsWaits(t *testing.T) {
	store := newHeldStore()
	p, err := newParallelLog(store, func() bool { return false }, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.waitSynced(context.Background(), 1); !errors.Is(err, errLogClosed) {
		t.Fatalf("waitSynced on a closed log = %v, want errLogClosed", err)
	}
}

// heldCluster is a witness cluster whose nodes' log writes can be held.
func heldCluster(t *testing.T, write LeaderWrite) (*harness, map[string]*heldStore) {
	t.Helper()
	h := newHarness(t, ModeWitness, []string{"a", "b", "w"}, "w")
	stores := map[string]*heldStore{}
	var mu sync.Mutex
	h.tweak = func(c *Config) {
		c.LeaderWrite = write
		id := c.NodeID
		c.wrapLogStore = func(s logStableStore) logStableStore {
			held := &heldStore{logStableStore: s}
			mu.Lock()
			stores[id] = held
			mu.Unlock()
			return held
		}
	}
	for _, id := range []string{"a", "b", "w"} {
		h.start(id)
	}
	return h, stores
}

// applyWhileTheLeadersWriteIsHeld starts a held cluster, applies v1, holds
// the Active's log writes and applies v2 (at index) in the background;
// answered gets v2's outcome.
func applyWhileTheLeadersWriteIsHeld(t *testing.T, write LeaderWrite) (h *harness, active string, stores map[string]*heldStore, index uint64, release func(), answered chan error) {
	t.Helper()
	h, stores = heldCluster(t, write)
	active = h.waitOneActive(15 * time.Second)
	h.apply(active, "v1")
	leader := h.node(active)
	index = leader.Raft().LastIndex() + 1
	release = stores[active].hold()
	answered = make(chan error, 1)
	go func() {
		_, err := leader.Apply(context.Background(), []byte("v2"))
		answered <- err
	}()
	return h, active, stores, index, release, answered
}

// The leader replicates an entry while its own write is held, yet the
// entry is neither committed, applied anywhere nor answered until the
// leader's copy is on disk: a commit needs two disks.
func TestAnEntryCommitsOnlyOnceTheLeadersOwnCopyIsWritten(t *testing.T) {
	t.Parallel()
	h, active, _, index, release, answered := applyWhileTheLeadersWriteIsHeld(t, LeaderWriteParallel)
	defer release()
	leader := h.node(active)
	testwait.ForDetail(t, 10*time.Second, "v2 in both followers' logs while the leader's write is held", func() (bool, string) {
		missing := ""
		for id, n := range h.running() {
			if id != active && !storedIn(t, n.logs, index) {
				missing += " " + id
			}
		}
		return missing == "", "not yet in" + missing
	})
	// Both followers have acknowledged it; give raft several heartbeats and
	// commit timeouts to (wrongly) count it before looking.
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-answered:
		t.Fatalf("v2 was answered (err %v) while only the followers' disks held it", err)
	default:
	}
	if ci := leader.Stats().CommitIndex; ci >= index {
		t.Fatalf("the leader's commit index is %d, at v2's %d, while its own copy is held", ci, index)
	}
	for id, f := range h.fsms {
		if slices.Contains(f.Values(), "v2") {
			t.Fatalf("%s applied v2 while the leader's copy was held", id)
		}
	}
	release()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("apply v2 once the leader's copy was written: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("v2 not answered within 10 s of the leader's write")
	}
	testwait.ForDetail(t, 5*time.Second, "v2 applied on every node", func() (bool, string) {
		for id, f := range h.fsms {
			if !slices.Equal(f.Values(), []string{"v1", "v2"}) {
				return false, id + " has " + strings.Join(f.Values(), ",")
			}
		}
		return true, ""
	})
}

// With leader_write: sequential the leader replicates only what its own
// disk already holds (hashicorp/raft's order).
func TestSequentialLeaderWriteReplicatesAfterTheLeadersCopy(t *testing.T) {
	t.Parallel()
	h, active, stores, index, release, answered := applyWhileTheLeadersWriteIsHeld(t, LeaderWriteSequential)
	defer release()
	testwait.For(t, 10*time.Second, "the leader's write of v2 held", func() bool { return stores[active].waiting.Load() == 1 })
	time.Sleep(200 * time.Millisecond)
	for id, n := range h.running() {
		if id != active && storedIn(t, n.logs, index) {
			t.Fatalf("%s has v2 while the sequential leader's own write is held", id)
		}
	}
	release()
	if err := <-answered; err != nil {
		t.Fatalf("apply v2: %v", err)
	}
}

func TestParallelLogQueueIsBounded(t *testing.T) {
	store := newHeldStore()
	p, err := newParallelLog(store, func() bool { return true }, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	release := store.hold()
	defer release()
	big := func(i uint64) []*raft.Log {
		return []*raft.Log{{Index: i, Term: 1, Type: raft.LogCommand, Data: make([]byte, maxQueuedBytes/2)}}
	}
	if err := p.StoreLogs(big(1)); err != nil {
		t.Fatal(err)
	}
	if err := p.StoreLogs(big(2)); err != nil {
		t.Fatal(err)
	}
	// The queue is full while the disk is held: the next hand-over waits.
	done := make(chan error, 1)
	go func() { done <- p.StoreLogs(big(3)) }()
	select {
	case err := <-done:
		t.Fatalf("a hand-over past %d queued bytes returned (%v) while the disk was held", maxQueuedBytes, err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("hand-over once the disk went on: %v", err)
	}
	if err := p.waitSynced(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
}

// A leader whose background log write fails answers nothing it could not
// write and reports the failure through LogFailure (the daemon stops on
// it, so the service manager restarts the node and it reads its log from
// disk again); the other nodes report none.
func TestAFailedLeaderLogWriteIsReported(t *testing.T) {
	t.Parallel()
	h, stores := heldCluster(t, LeaderWriteParallel)
	active := h.waitOneActive(15 * time.Second)
	h.apply(active, "v1")
	leader := h.node(active)
	if err := leader.LogFailure(); err != nil {
		t.Fatalf("LogFailure before any failure = %v", err)
	}
	disk := errors.New("input/output error")
	stores[active].failWith(disk)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := leader.Apply(ctx, []byte("v2")); err == nil {
		t.Fatal("an entry the leader could not write was answered")
	}
	testwait.ForDetail(t, 5*time.Second, "the leader reports its failed write", func() (bool, string) {
		err := leader.LogFailure()
		return errors.Is(err, disk), fmt.Sprint(err)
	})
	for id, n := range h.running() {
		if id != active && n.LogFailure() != nil {
			t.Fatalf("%s reports a log failure it did not have: %v", id, n.LogFailure())
		}
	}
}
