package fsm

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// A snapshot holds a bbolt read transaction while raft streams it; a
// commit that had to grow the map would wait for it to end, and applies
// behind the commit with it. The default map is large enough that a state
// growing by 300 MiB under an open snapshot keeps committing.
func TestCommitsGoOnUnderAnOpenSnapshotWhileTheFileGrows(t *testing.T) {
	const grow = 300 << 20 // past the 256 MiB map of earlier builds
	if DefaultMmapSize < 1<<30 {
		t.Skipf("the default map here is %d MiB; a snapshot taken while the file outgrows it holds commits up", DefaultMmapSize>>20)
	}
	path := filepath.Join(t.TempDir(), "state.db")
	// Held commits of 32 MiB: a commit per apply would spend the time
	// writing the freelist, which grows while the snapshot pins the pages.
	f, err := Open(path, Options{Logger: zerolog.Nop(), NoSync: true, CommitBytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := newLogWriter(t)
	mustOK(t, f, w.cmd(enqueue(msg("first", "t", "x"))))
	snap, err := f.OpenSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			snap.Release()
			released = true
		}
	}
	defer release()

	done := make(chan error, 1)
	go func() {
		payload := string(make([]byte, 1<<20))
		for i := 0; i < grow>>20; i++ {
			if res := applyOne(t, f, w.cmd(enqueue(msg(fmt.Sprint("m", i), "t", payload)))); res.Err != nil {
				done <- res.Err
				return
			}
		}
		done <- f.Commit()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		release()
		t.Fatalf("applies and commits waited for the open snapshot (they went on %v after it was released)", <-done)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() < grow {
		t.Fatalf("the state file is %d MiB, want it grown past %d MiB", st.Size()>>20, grow>>20)
	}
	if snap.Meta().AppliedIndex != 1 {
		t.Fatalf("the snapshot moved: applied index %d", snap.Meta().AppliedIndex)
	}
}
