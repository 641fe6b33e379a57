package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The console format writes no colour codes into a log file, where an
// operator greps it and the codes would split every field.
func TestConsoleLogToAFileHasNoColourCodes(t *testing.T) {
	name := filepath.Join(t.TempDir(), "scadad.log")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	log, err := newLogger(f, "info", "console", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	log.Warn().Str("target", "historian").Msg("delivery failed")
	f.Close()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); strings.Contains(got, "\x1b[") || !strings.Contains(got, "delivery failed") || !strings.Contains(got, "target=historian") {
		t.Fatalf("console log %q: want the message and its field without colour codes", got)
	}
}
