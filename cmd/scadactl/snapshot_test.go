package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A backup's progress written to a log file is one final line, not a
// running count rewritten with carriage returns.
func TestProgressToAFileIsOneLine(t *testing.T) {
	name := filepath.Join(t.TempDir(), "stderr.log")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	p := newProgress(f, "sent", 3<<20)
	for range 48 {
		p.add(64 << 10)
		p.last = p.last.AddDate(-1, 0, 0) // every add is due
	}
	p.finish()
	f.Close()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); strings.Contains(got, "\r") || strings.Count(got, "\n") != 1 || !strings.Contains(got, "sent 3.0 MiB / 3.0 MiB") {
		t.Fatalf("progress wrote %q, want one line with the final count and no carriage returns", got)
	}
}
