package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The console format writes no colour codes into a file or a pipe, where
// an operator greps the log and the codes would split every field.
func TestConsoleLogToAFileHasNoColourCodes(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "scadad.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var buf bytes.Buffer
	for _, tc := range []struct {
		name string
		w    interface{ Write([]byte) (int, error) }
		read func() string
	}{
		{"buffer", &buf, buf.String},
		{"file", f, func() string {
			b, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}},
	} {
		log, err := newLogger(tc.w, "info", "console", "node-a")
		if err != nil {
			t.Fatal(err)
		}
		log.Warn().Str("target", "historian").Msg("delivery failed")
		got := tc.read()
		if strings.Contains(got, "\x1b[") {
			t.Errorf("%s: console log has colour codes: %q", tc.name, got)
		}
		if !strings.Contains(got, "target=historian") || !strings.Contains(got, "delivery failed") {
			t.Errorf("%s: console log %q lacks the message or its field", tc.name, got)
		}
	}
}
