package raftnode

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

func TestSnapshotStoreRemovesPartialSnapshotsAtOpen(t *testing.T) {
	dir := t.TempDir()
	partial := filepath.Join(dir, "snapshots", "3-12832-1796028899478.tmp")
	if err := os.MkdirAll(partial, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(partial, "state.bin"), []byte("half a snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := openSnapshotStore(dir, 2, newHclogAdapter(zerolog.Nop(), "test"), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(partial); !os.IsNotExist(err) {
		t.Fatalf("partial snapshot still there after open: %v", err)
	}
	// A snapshot that completes is kept and listed.
	sink, err := s.Create(raft.SnapshotVersionMax, 10, 2, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	metas, err := s.List()
	if err != nil || len(metas) != 1 || metas[0].Index != 10 {
		t.Fatalf("List after one snapshot = %v, %v", metas, err)
	}
}

// failingSink is a sink whose finishing fails the way raft's file sink
// does on a full disk: with an error, leaving its folder behind.
type failingSink struct {
	raft.SnapshotSink
	err error
}

func (f failingSink) Close() error  { return f.err }
func (f failingSink) Cancel() error { return f.err }

func TestCleanSinkRemovesItsFolderWhenFinishingFails(t *testing.T) {
	full := errors.New("write state.bin: no space left on device")
	for _, tc := range []struct {
		name    string
		inner   error
		finish  func(raft.SnapshotSink) error
		removed bool
	}{
		{"close fails", full, raft.SnapshotSink.Close, true},
		{"cancel fails", full, raft.SnapshotSink.Cancel, true},
		{"cancel succeeds but leaves the folder", nil, raft.SnapshotSink.Cancel, true},
		{"close succeeds", nil, raft.SnapshotSink.Close, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := filepath.Join(t.TempDir(), "1-2-3.tmp")
			if err := os.MkdirAll(tmp, 0o755); err != nil {
				t.Fatal(err)
			}
			sink := &cleanSink{SnapshotSink: failingSink{err: tc.inner}, tmp: tmp, log: zerolog.Nop()}
			if err := tc.finish(sink); !errors.Is(err, tc.inner) {
				t.Fatalf("error = %v, want %v", err, tc.inner)
			}
			_, err := os.Stat(tmp)
			if gone := os.IsNotExist(err); gone != tc.removed {
				t.Fatalf("folder removed = %v, want %v", gone, tc.removed)
			}
		})
	}
}
