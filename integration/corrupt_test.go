package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// TestCorruptFilesExitWithASentence: a state file, raft log or snapshot
// metadata that cannot be read makes scadad exit 1 with one sentence naming
// the file and the recovery, never a Go panic or a fault (a crash loop under
// Restart=always tells the operator nothing). Each case starts the stopped
// Standby on a damaged copy of its own data folder.
func TestCorruptFilesExitWithASentence(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	for _, n := range c.Nodes {
		// Snapshots early, so the data folder has one to damage.
		cfg, err := os.ReadFile(n.Config)
		if err != nil {
			t.Fatal(err)
		}
		cfg = []byte(strings.Replace(string(cfg), "cluster:\n", "cluster:\n  snapshot_threshold: 64\n  snapshot_interval: 1s\n", 1))
		// The raft.db case needs a log in raft.db: a new node's default
		// (auto) is raft-wal.
		cfg = append(cfg, "\nraft:\n  log_store: boltdb\n"...)
		if err := os.WriteFile(n.Config, cfg, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	sink := startSink(t)
	deploySite(t, c, testcluster.SiteConfig("corrupt-files", map[string]string{"sink": sink.URL}, 1000))
	if err := sink.SetFailing(true); err != nil {
		t.Fatal(err)
	}
	enqueueAll(t, active, seqIDs("corrupt", 400), make([]byte, 2048))
	standby := otherVoter(t, c, active)
	data := filepath.Join(standby.Dir, "data")
	testwait.For(t, 30*time.Second, standby.ID+" to take a snapshot", func() bool {
		return len(completeSnapshotFiles(filepath.Join(data, "raft", "snapshots"), "meta.json")) > 0
	})

	c.Stop(standby)
	backup := filepath.Join(t.TempDir(), "data")
	copyDir(t, data, backup)

	// bbolt grows a file ahead of its pages, so the cut is well inside
	// them: 5 pages of 4 KiB and a bit.
	truncate := func(name string) func(t *testing.T) {
		return func(t *testing.T) {
			path := filepath.Join(data, name)
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Size() < 1<<20 {
				t.Fatalf("%s holds %d bytes, too few to truncate inside its pages", name, st.Size())
			}
			if err := os.Truncate(path, 5*4096+100); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name, file string
		damage     func(t *testing.T)
	}{
		{"fsm.db truncated", "fsm.db", truncate("fsm.db")},
		{"raft.db truncated", "raft.db", truncate(filepath.Join("raft", "raft.db"))},
		{"snapshot meta.json unparsable", "meta.json", func(t *testing.T) {
			for _, m := range completeSnapshotFiles(filepath.Join(data, "raft", "snapshots"), "meta.json") {
				if err := os.WriteFile(m, []byte("{\"ID\": \"trunc"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
	stack := regexp.MustCompile(`panic:|goroutine \d+|SIGBUS|signal: bus error|\.go:\d+`)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.RemoveAll(data); err != nil {
				t.Fatal(err)
			}
			copyDir(t, backup, data)
			tc.damage(t)
			if err := os.Truncate(standby.LogPath(), 0); err != nil {
				t.Fatal(err)
			}
			start(t, c, standby)
			defer c.Kill(standby)
			testwait.For(t, 60*time.Second, standby.ID+" to exit on the damaged "+tc.file, standby.Exited)
			out, _ := os.ReadFile(standby.LogPath())
			if code := standby.ExitCode(); code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			if loc := stack.FindIndex(out); loc != nil {
				t.Errorf("a stack or fault instead of a sentence (%q):\n%s", out[loc[0]:loc[1]], tail(out, 30))
			}
			last := lastLine(out)
			if !strings.HasPrefix(last, "scadad: ") || !strings.Contains(last, tc.file) {
				t.Errorf("last line %q does not name %s:\n%s", last, tc.file, tail(out, 30))
			}
		})
	}
	// The undamaged copy still starts.
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	copyDir(t, backup, data)
	start(t, c, standby)
	testwait.For(t, 30*time.Second, standby.ID+" healthy again", func() bool {
		h, ok := standby.Health()
		return ok && h.Role != ""
	})

}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		if info.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(fmt.Errorf("copy %s to %s: %w", from, to, err))
	}
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
