package raftnode

import (
	"testing"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

// Raft clears a follower's log suffix when a new leader's log disagrees
// with it (the entries in flight at a kill or a cut). raft-wal v0.4.0 then
// sealed the tail segment without its index, and the next start failed
// "sealed segment has no index block" (hashicorp/raft-wal#31; the fault
// suite's kill-all round found it): the log must reopen with the entries
// kept and the one written after the truncation.
func TestWALReopensAfterRaftClearsALogSuffix(t *testing.T) {
	dir := t.TempDir()
	n := &Node{hlog: newHclogAdapter(zerolog.Nop(), "raft")}
	w, err := openWALAt(dir, n)
	if err != nil {
		t.Fatal(err)
	}
	var logs []*raft.Log
	for i := uint64(1); i <= 5; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}})
	}
	if err := w.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := w.DeleteRange(4, 5); err != nil {
		t.Fatalf("clear the log suffix 4-5: %v", err)
	}
	if err := w.StoreLog(&raft.Log{Index: 4, Term: 2, Type: raft.LogCommand, Data: []byte("new")}); err != nil {
		t.Fatalf("store entry 4 of the new term: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w, err = openWALAt(dir, n)
	if err != nil {
		t.Fatalf("reopen after the truncation: %v", err)
	}
	defer w.Close()
	for _, want := range []raft.Log{{Index: 1, Term: 1}, {Index: 3, Term: 1}, {Index: 4, Term: 2}} {
		var got raft.Log
		if err := w.GetLog(want.Index, &got); err != nil || got.Term != want.Term {
			t.Errorf("entry %d after reopening: term %d, %v; want term %d", want.Index, got.Term, err, want.Term)
		}
	}
	if last, err := w.LastIndex(); err != nil || last != 4 {
		t.Errorf("last index %d (%v), want 4", last, err)
	}
}
