package fsm

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/mapped"
)

// openReleasing opens a state file whose pages are released as the daemon
// releases them (madvise), recording how much of the file was resident at
// each release; commits release every releaseEvery bytes of pages (0: the
// default).
func openReleasing(t *testing.T, releaseEvery int64) (*FSM, *releases) {
	t.Helper()
	seen := &releases{}
	path := filepath.Join(t.TempDir(), "state.db")
	f, err := Open(path, Options{Logger: zerolog.Nop(), NoSync: true, ReleaseEvery: releaseEvery,
		ReleasePages: func(p string) (func() error, error) {
			rs, err := mapped.Ranges(p)
			if err != nil {
				return nil, err
			}
			return func() error {
				kb, err := mapped.ResidentKB(p)
				if err != nil {
					return err
				}
				seen.add(kb)
				return mapped.Drop(rs)
			}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f, seen
}

// releases records the resident kB at each release; a commit's release
// and a walk's run side by side.
type releases struct {
	mu sync.Mutex
	kb []int
}

func (r *releases) add(kb int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kb = append(r.kb, kb)
}

// take returns the releases recorded since the last take.
func (r *releases) take() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	kb := r.kb
	r.kb = nil
	return kb
}

// fillMiB enqueues about mib MiB of 1 KB messages.
func fillMiB(t *testing.T, f *FSM, mib int) {
	t.Helper()
	w := newLogWriter(t)
	payload := strings.Repeat("p", 1000)
	for b := 0; b < mib; b++ {
		msgs := make([]*fsmpb.Message, 0, 1024)
		for i := 0; i < 1024; i++ {
			msgs = append(msgs, msg(fmt.Sprintf("m-%d-%d", b, i), "t", payload))
		}
		mustOK(t, f, w.cmd(enqueue(msgs...)))
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
}

func stateFileMiB(t *testing.T, f *FSM) int {
	t.Helper()
	st, err := os.Stat(f.path)
	if err != nil {
		t.Fatal(err)
	}
	return int(st.Size() >> 20)
}

func residentMiB(t *testing.T, f *FSM) int {
	t.Helper()
	kb, err := mapped.ResidentKB(f.path)
	if err != nil {
		t.Fatal(err)
	}
	return kb >> 10
}

// residentBound is how much of the state file, in MiB, a walk of the whole
// state may leave resident at any release, and after it: the kernel maps
// up to 16 cached neighbours of each page read (fault-around), and pages,
// not bytes, are resident, so a walk releasing every MiB may show 16 MiB
// and more.
const residentBound = 24

// A snapshot digests the whole state through the map (every raft snapshot,
// every backup), and so do a scrub and a checkpoint. Without handing the
// pages back as it goes, each adds the whole file to the process's resident
// size: 0.5–1.1 GiB sampled while a million 1 KB messages were enqueued.
func TestWalksOfTheWholeStateHandBackThePagesTheyRead(t *testing.T) {
	f, seen := openReleasing(t, 1<<40) // only the walks release
	fillMiB(t, f, 96)
	if size := stateFileMiB(t, f); size < 96 {
		t.Fatalf("state file of %d MiB, want at least 96", size)
	}
	for _, walk := range []struct {
		name string
		// timed: bbolt's consistency check, part of the scrub, is handed
		// back only when it ends, so what it shows at a release is not
		// bounded.
		timed bool
		run   func() error
	}{
		{"snapshot", false, func() error {
			snap, err := f.OpenSnapshot()
			if err != nil {
				return err
			}
			defer snap.Release()
			_, err = snap.WriteTo(io.Discard)
			return err
		}},
		{"scrub", true, func() error {
			_, _, err := f.Scrub(context.Background(), 0)
			return err
		}},
		{"digest", false, func() error {
			_, err := f.Digest()
			return err
		}},
	} {
		t.Run(walk.name, func(t *testing.T) {
			f.ReleasePages()
			seen.take()
			if err := walk.run(); err != nil {
				t.Fatal(err)
			}
			after := residentMiB(t, f)
			peak, at := 0, seen.take()
			for _, kb := range at {
				peak = max(peak, kb>>10)
			}
			t.Logf("state file %d MiB; resident %d MiB at most at %d releases, %d MiB after", stateFileMiB(t, f), peak, len(at), after)
			if walk.timed {
				peak = 0
			}
			if peak > residentBound || after > residentBound {
				t.Fatalf("%s left %d MiB of the state file resident (%d MiB at a release); want at most %d", walk.name, after, peak, residentBound)
			}
		})
	}
}

// While a snapshot walks the state, applies go on and their commits write
// pages scattered through the file: each page the walk reads brings its
// cached neighbours along, most of them no part of the walk. With a
// release every 16 MiB read the resident size reached 40-50 MiB here and
// 130-260 MiB in a node holding a million messages.
func TestASnapshotWhileApplyingStaysSmall(t *testing.T) {
	f, seen := openReleasing(t, 0)
	fillMiB(t, f, 96)
	f.ReleasePages()
	var stop atomic.Bool
	applied := make(chan error, 1)
	go func() {
		w := newLogWriter(t)
		w.index = 1 << 30
		payload := strings.Repeat("q", 1000)
		for b := 0; !stop.Load(); b++ {
			msgs := make([]*fsmpb.Message, 0, 64)
			for i := 0; i < 64; i++ {
				msgs = append(msgs, msg(fmt.Sprintf("x-%d-%d", b, i), "t", payload))
			}
			if res, ok := f.Apply(w.cmd(enqueue(msgs...))).(*Result); !ok || res.Err != nil {
				applied <- fmt.Errorf("apply: %v", res)
				return
			}
		}
		applied <- nil
	}()
	// Let the applies scatter pages before and while the snapshot walks.
	for deadline := time.Now().Add(5 * time.Second); stateFileMiB(t, f) < 128 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	seen.take()
	snap, err := f.OpenSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	_, err = snap.WriteTo(io.Discard)
	snap.Release()
	stop.Store(true)
	if aerr := <-applied; aerr != nil {
		t.Fatal(aerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	peak, at := 0, seen.take()
	for _, kb := range at {
		peak = max(peak, kb>>10)
	}
	t.Logf("state file %d MiB; resident %d MiB at most at %d releases", stateFileMiB(t, f), peak, len(at))
	if peak > residentBound {
		t.Fatalf("%d MiB of the state file resident at a release while the snapshot walked; want at most %d", peak, residentBound)
	}
}
