package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A backup's progress written to a log file or a pipe is one final line,
// not a running count rewritten with carriage returns.
func TestProgressToAFileIsOneLine(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var buf bytes.Buffer
	for _, tc := range []struct {
		name string
		p    *progress
		read func() string
	}{
		{"buffer", newProgress(&buf, "saved", 0), buf.String},
		{"file", newProgress(f, "sent", 3<<20), func() string {
			b, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 3 << 4 {
				tc.p.add(64 << 10)
				tc.p.last = tc.p.last.AddDate(-1, 0, 0) // every add is due
			}
			tc.p.finish()
			got := tc.read()
			if strings.Contains(got, "\r") || strings.Count(got, "\n") != 1 {
				t.Fatalf("progress wrote %q, want one line without carriage returns", got)
			}
			if !strings.Contains(got, "3.0 MiB") {
				t.Fatalf("progress wrote %q, want the final count 3.0 MiB", got)
			}
		})
	}
}
