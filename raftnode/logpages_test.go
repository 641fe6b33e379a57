package raftnode

import (
	"bytes"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

func TestReleasingLogStoreReleasesAfterEveryThreshold(t *testing.T) {
	calls := make(chan string, 10)
	s := &releasingLogStore{
		LogStore: raft.NewInmemStore(),
		path:     "/data/raft.db",
		release:  func(p string) error { calls <- p; return nil },
		every:    4000,
		log:      zerolog.Nop(),
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

func TestReleasingLogStoreCompactsInChunksOldestFirst(t *testing.T) {
	var released int
	s := &releasingLogStore{
		LogStore: raft.NewInmemStore(),
		path:     "/data/raft.db",
		release:  func(string) error { released++; return nil },
		every:    1 << 40,
		log:      zerolog.Nop(),
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
