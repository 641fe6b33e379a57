package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
)

// crash closes the state file the way a killed process leaves it: no sync,
// marker left in place.
func crash(t *testing.T, f *FSM) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.open != nil { // entries held uncommitted die with the process
		_ = f.open.Rollback()
		f.open = nil
	}
	if err := f.db.Close(); err != nil {
		t.Fatal(err)
	}
	f.db, f.closed = nil, true
}

func TestDeferredSyncTrustsOnlyTheBootThatWrote(t *testing.T) {
	for _, tc := range []struct {
		name      string
		writeBoot string // "" = commits synced (no boot id)
		stop      func(*testing.T, *FSM)
		openBoot  string
		refused   bool
	}{
		{"process crash, same boot", "boot-a", crash, "boot-a", false},
		{"process crash, OS restarted", "boot-a", crash, "boot-b", true},
		{"clean close, OS restarted", "boot-a", func(t *testing.T, f *FSM) { mustClose(t, f) }, "boot-b", false},
		{"no boot id: synced, OS restarted", "", crash, "boot-b", false},
		{"process crash, boot id unreadable now", "boot-a", crash, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.db")
			opts := Options{Logger: zerolog.Nop(), DeferSync: true, BootID: func() string { return tc.writeBoot }}
			f, err := Open(path, opts)
			if err != nil {
				t.Fatal(err)
			}
			_, statErr := os.Stat(path + unsyncedSuffix)
			if marked := statErr == nil; marked != (tc.writeBoot != "") {
				t.Fatalf("marker present = %v while commits deferred = %v", marked, tc.writeBoot != "")
			}
			w := newLogWriter(t)
			for i := range 5 {
				mustOK(t, f, w.cmd(enqueue(msg(fmt.Sprintf("m%d", i), "sink", "payload"))))
			}
			want := digest(t, f)
			tc.stop(t, f)

			opts.BootID = func() string { return tc.openBoot }
			g, err := Open(path, opts)
			if tc.refused {
				if !errors.Is(err, ErrUnsyncedState) {
					t.Fatalf("Open = %v, want ErrUnsyncedState", err)
				}
				if err := DiscardState(path); err != nil {
					t.Fatal(err)
				}
				if g, err = Open(path, opts); err != nil {
					t.Fatalf("open after discard: %v", err)
				}
				defer g.Close()
				if g.Meta().AppliedIndex != 0 {
					t.Fatalf("discarded state reopened at index %d", g.Meta().AppliedIndex)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open = %v", err)
			}
			defer g.Close()
			if g.Meta().AppliedIndex != 5 || digest(t, g) != want {
				t.Fatalf("reopened at index %d with another digest", g.Meta().AppliedIndex)
			}
		})
	}
}

func mustClose(t *testing.T, f *FSM) {
	t.Helper()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestWithStableMapHoldsTheMapOnlyWhileOpen(t *testing.T) {
	f := openTestFSM(t)
	withStableMap := func(fn func(string) error) error {
		f.mu.RLock()
		defer f.mu.RUnlock()
		return f.withStableMap(fn)
	}
	var got string
	if err := withStableMap(func(path string) error { got = path; return nil }); err != nil || got != f.Path() {
		t.Fatalf("WithStableMap gave path %q, err %v; want %q", got, err, f.Path())
	}
	boom := errors.New("madvise refused")
	if err := withStableMap(func(string) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("fn's error came back as %v", err)
	}
	// A commit while the map is held goes through (bbolt only waits for
	// read transactions when it must grow the map).
	w := newLogWriter(t)
	err := withStableMap(func(string) error {
		mustOK(t, f, w.cmd(enqueue(msg("held", "sink", "payload"))))
		return nil
	})
	if err != nil || f.Meta().AppliedIndex != 1 {
		t.Fatalf("commit under a held map: err %v, applied %d", err, f.Meta().AppliedIndex)
	}
	mustClose(t, f)
	if err := withStableMap(func(string) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}

func TestReleasePagesFollowsThePagesCommitsWrite(t *testing.T) {
	for _, tc := range []struct {
		name      string
		every     int64
		wantCalls bool
	}{
		{"every 64 KiB of pages", 64 << 10, true},
		{"every 1 GiB of pages", 1 << 30, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls int
			var gotPath string
			path := filepath.Join(t.TempDir(), "state.db")
			f, err := Open(path, Options{Logger: zerolog.Nop(), NoSync: true, ReleaseEvery: tc.every,
				ReleasePages: func(p string) (func() error, error) { gotPath = p; return func() error { calls++; return nil }, nil }})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			w := newLogWriter(t)
			payload := string(bytes.Repeat([]byte("p"), 4<<10))
			for i := range 100 {
				mustOK(t, f, w.cmd(enqueue(msg(fmt.Sprintf("m%d", i), "sink", payload))))
			}
			// 100 commits of a 4 KiB message write well over 400 KiB of pages.
			if (calls > 0) != tc.wantCalls || (tc.wantCalls && (calls < 3 || gotPath != path)) {
				t.Fatalf("ReleasePages called %d times with %q", calls, gotPath)
			}
		})
	}
}

// TestEmptyMarkerIsNoMarker: a start that could not finish writing the
// unsynced marker (its disk was full) leaves it empty; commits go unsynced
// only once the marker is on disk, so the next start trusts the state
// instead of discarding it as if the OS had restarted.
func TestEmptyMarkerIsNoMarker(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	opts := Options{Logger: zerolog.Nop(), BootID: func() string { return "" }}
	f, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	w := newLogWriter(t)
	mustOK(t, f, w.cmd(enqueue(msg("m0", "sink", "payload"))))
	mustClose(t, f)
	if err := os.WriteFile(path+unsyncedSuffix, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	opts.DeferSync, opts.BootID = true, func() string { return "boot-b" }
	g, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open with an empty marker = %v, want the state trusted", err)
	}
	defer g.Close()
	if g.Meta().AppliedIndex != 1 {
		t.Fatalf("reopened at index %d, want 1", g.Meta().AppliedIndex)
	}
}
