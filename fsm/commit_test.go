package fsm

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
)

// appliedDigest digests the applied state as readers see it, without
// committing held entries (Digest commits them first).
func appliedDigest(t *testing.T, f *FSM) string {
	t.Helper()
	var sum string
	err := f.view(func(tx *bolt.Tx) error {
		var err error
		sum, err = digestTx(tx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func openHeld(t *testing.T, path string, commitBytes int) *FSM {
	t.Helper()
	f, err := Open(path, Options{Logger: zerolog.Nop(), NoSync: true, CommitBytes: commitBytes})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// heldLogs is a mix of commands: every kind of state a held transaction
// carries.
func heldLogs(t *testing.T) []*raft.Log {
	w := newLogWriter(t)
	var logs []*raft.Log
	for i := range 20 {
		logs = append(logs, w.cmd(enqueue(msg(fmt.Sprintf("m%d", i), "sink", "payload"), msg(fmt.Sprintf("n%d", i), "other", "p"))))
	}
	logs = append(logs, w.cmd(delivered("m0", "m1")), w.cmd(park("m2", "refused", 3)), w.cmd(audit("test", "held")))
	return logs
}

func TestHeldEntriesAreReadAtOnceAndReplayedAfterACrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	f := openHeld(t, path, 1<<30)
	logs := heldLogs(t)
	for _, l := range logs {
		mustOK(t, f, l)
	}
	last := logs[len(logs)-1].Index
	if got := f.Meta().AppliedIndex; got != last {
		t.Fatalf("applied index %d, want %d", got, last)
	}
	// Readers see held entries without a commit.
	if st, err := f.SFLookup("m5"); err != nil || st != StatePending {
		t.Fatalf("SFLookup(m5) = %v, %v; want pending", st, err)
	}
	stats, err := f.SFStats()
	if err != nil || stats["sink"].Pending != 17 || stats["sink"].Parked != 1 {
		t.Fatalf("SFStats = %+v, %v; want 17 pending, 1 parked on sink", stats, err)
	}
	want := appliedDigest(t, f)

	crash(t, f)
	g := openHeld(t, path, 1<<30)
	defer mustClose(t, g)
	if got := g.Meta().AppliedIndex; got != 0 {
		t.Fatalf("after the crash the file holds entries up to %d; nothing was committed", got)
	}
	// raft replays what the file lacks.
	for _, l := range logs {
		applyOne(t, g, l)
	}
	if got := appliedDigest(t, g); got != want {
		t.Fatalf("replayed state differs from the state before the crash")
	}
}

func TestHeldEntriesAreCommittedByBytesCommitSnapshotAndClose(t *testing.T) {
	logs := heldLogs(t)
	last := logs[len(logs)-1].Index
	for _, tc := range []struct {
		name        string
		commitBytes int
		then        func(t *testing.T, f *FSM)
		committed   func(logs []*raft.Log) uint64 // lowest applied index the file must hold
	}{
		{"every batch (CommitBytes 0)", 0, nil, func([]*raft.Log) uint64 { return last }},
		{"CommitBytes reached", 200, nil, func(logs []*raft.Log) uint64 {
			// The last entry that brought the held bytes to 200 or more.
			held, at := 0, uint64(0)
			for _, l := range logs {
				if held += len(l.Data); held >= 200 {
					held, at = 0, l.Index
				}
			}
			return at
		}},
		{"Commit", 1 << 30, func(t *testing.T, f *FSM) {
			if err := f.Commit(); err != nil {
				t.Fatal(err)
			}
		}, func([]*raft.Log) uint64 { return last }},
		{"Snapshot", 1 << 30, func(t *testing.T, f *FSM) {
			s, err := f.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Release()
			if got := s.(*Snapshot).Meta().AppliedIndex; got != last {
				t.Fatalf("snapshot at %d, want %d", got, last)
			}
		}, func([]*raft.Log) uint64 { return last }},
		{"Close", 1 << 30, func(t *testing.T, f *FSM) { mustClose(t, f) }, func([]*raft.Log) uint64 { return last }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.db")
			f := openHeld(t, path, tc.commitBytes)
			for _, l := range logs {
				mustOK(t, f, l)
			}
			if tc.then != nil {
				tc.then(t, f)
			}
			if !f.closed {
				crash(t, f)
			}
			g := openHeld(t, path, 0)
			defer mustClose(t, g)
			want := tc.committed(logs)
			if want == 0 {
				t.Fatal("test bug: CommitBytes never reached")
			}
			if got := g.Meta().AppliedIndex; got < want {
				t.Fatalf("the file holds entries up to %d, want at least %d", got, want)
			}
		})
	}
}

func TestReleasesPagesAfterHeldCommits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	released := 0
	f, err := Open(path, Options{Logger: zerolog.Nop(), NoSync: true, CommitBytes: 1 << 30, ReleaseEvery: 1,
		ReleasePages: func(string) (func() error, error) { return func() error { released++; return nil }, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, f)
	for _, l := range heldLogs(t) {
		mustOK(t, f, l)
	}
	if released != 0 {
		t.Fatalf("%d releases before any commit", released)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if released != 1 {
		t.Fatalf("%d releases after one commit, want 1", released)
	}
}
