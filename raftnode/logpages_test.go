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
