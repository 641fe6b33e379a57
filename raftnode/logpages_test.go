package raftnode

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

func TestReleasingStoreReleasesAfterEveryThreshold(t *testing.T) {
	calls := make(chan string, 10)
	s := &releasingStore{
		logStableStore: raft.NewInmemStore(),
		path:           "/data/raft.db",
		release:        func(p string) error { calls <- p; return nil },
		every:          4000,
		log:            zerolog.Nop(),
	}
	entry := func(i uint64) *raft.Log {
		return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte("e"), 1000)}
	}
	expect := func(what string, want bool) {
		t.Helper()
		select {
		case p := <-calls:
			if !want {
				t.Fatalf("%s: released %s", what, p)
			}
			if p != "/data/raft.db" {
				t.Fatalf("%s: released %q", what, p)
			}
			for s.running.Load() { // the release goroutine ends
				time.Sleep(time.Millisecond)
			}
		case <-time.After(200 * time.Millisecond):
			if want {
				t.Fatalf("%s: no release", what)
			}
		}
	}
	// An append counts twice (it rewrites the previous entry's leaf).
	if err := s.StoreLogs([]*raft.Log{entry(1)}); err != nil {
		t.Fatal(err)
	}
	expect("2,000 bytes moved", false)
	if err := s.StoreLog(entry(2)); err != nil {
		t.Fatal(err)
	}
	expect("4,000 bytes moved", true)
	var l raft.Log
	for i := uint64(1); i <= 3; i++ {
		if err := s.GetLog(i%2+1, &l); err != nil {
			t.Fatal(err)
		}
	}
	expect("3,000 bytes read since", false)
	if err := s.GetLog(1, &l); err != nil {
		t.Fatal(err)
	}
	expect("4,000 bytes read since", true)
	if err := s.GetLog(99, &l); err == nil {
		t.Fatal("GetLog of a missing entry succeeded")
	}
}

func TestReleasingStoreCompactsInChunksOldestFirst(t *testing.T) {
	var released int
	s := &releasingStore{
		logStableStore: raft.NewInmemStore(),
		path:           "/data/raft.db",
		release:        func(string) error { released++; return nil },
		every:          1 << 40,
		log:            zerolog.Nop(),
	}
	for i := uint64(1); i <= 1000; i++ {
		if err := s.StoreLog(&raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte("e")}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		first, last   uint64
		wantReleases  int
		wantFirstLeft uint64
	}{
		{1, 700, 3, 701},         // 256 + 256 + 188
		{701, 701, 1, 702},       // one entry
		{702, 702 + 255, 1, 958}, // exactly one chunk
	} {
		released = 0
		if err := s.DeleteRange(tc.first, tc.last); err != nil {
			t.Fatal(err)
		}
		first, err := s.FirstIndex()
		if err != nil || first != tc.wantFirstLeft || released != tc.wantReleases {
			t.Fatalf("DeleteRange(%d, %d): first index %d (%v), %d releases; want %d, %d",
				tc.first, tc.last, first, err, released, tc.wantFirstLeft, tc.wantReleases)
		}
	}
	if last, _ := s.LastIndex(); last != 1000 {
		t.Fatalf("last index %d after compactions, want 1000", last)
	}
}

// A release runs only while no write to the store is under way: bbolt can
// move its map only inside a write, and the release may unmap it.
func TestReleasingStoreNeverReleasesDuringAWrite(t *testing.T) {
	var writing, overlaps atomic.Int32
	inner := &watchedStore{InmemStore: raft.NewInmemStore(), writing: &writing}
	s := &releasingStore{
		logStableStore: inner,
		path:           "/data/raft.db",
		release: func(string) error {
			for range 5 { // a release takes a while: madvise over the map
				if writing.Load() != 0 {
					overlaps.Add(1)
				}
				time.Sleep(20 * time.Microsecond)
			}
			return nil
		},
		every: 1, // release after every write
		log:   zerolog.Nop(),
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				idx := uint64(w*1000 + i + 1)
				_ = s.StoreLog(&raft.Log{Index: idx, Term: 1, Data: []byte("entry")})
				_ = s.SetUint64([]byte("term"), idx)
				_ = s.Set([]byte("vote"), []byte("a"))
			}
		}()
	}
	wg.Wait()
	if err := s.DeleteRange(1, 600); err != nil {
		t.Fatal(err)
	}
	for s.running.Load() {
		time.Sleep(time.Millisecond)
	}
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d releases ran during a write", n)
	}
}

// watchedStore marks its writes in progress.
type watchedStore struct {
	*raft.InmemStore
	writing *atomic.Int32
}

func (w *watchedStore) mark() func() {
	w.writing.Add(1)
	time.Sleep(50 * time.Microsecond) // widen the window a release could hit
	return func() { w.writing.Add(-1) }
}

func (w *watchedStore) StoreLogs(logs []*raft.Log) error {
	defer w.mark()()
	return w.InmemStore.StoreLogs(logs)
}
func (w *watchedStore) DeleteRange(a, b uint64) error {
	defer w.mark()()
	return w.InmemStore.DeleteRange(a, b)
}
func (w *watchedStore) Set(k, v []byte) error { defer w.mark()(); return w.InmemStore.Set(k, v) }
func (w *watchedStore) SetUint64(k []byte, v uint64) error {
	defer w.mark()()
	return w.InmemStore.SetUint64(k, v)
}

func TestReleasingStoreReleasesNothingOnceClosed(t *testing.T) {
	var released int
	s := &releasingStore{logStableStore: raft.NewInmemStore(), path: "/data/raft.db",
		release: func(string) error { released++; return nil }, every: 1 << 40, log: zerolog.Nop()}
	s.mu.Lock()
	s.releaseLocked()
	s.mu.Unlock()
	closed := false
	if err := s.closeStore(func() error { closed = true; return nil }); err != nil || !closed {
		t.Fatalf("closeStore: %v, closed %v", err, closed)
	}
	s.mu.Lock()
	s.releaseLocked()
	s.mu.Unlock()
	if released != 1 {
		t.Fatalf("%d releases, want 1 (none after the close)", released)
	}
}
