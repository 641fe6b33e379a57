package main

import (
	"bytes"
	"strings"
	"testing"
)

// Written to a file or a pipe (the quick start's logs/), the simulator's
// log carries no terminal colour codes.
func TestLogToAFileHasNoColourCodes(t *testing.T) {
	var buf bytes.Buffer
	log := newLogger(&buf)
	log.Info().Str("listen", "127.0.0.1:5001").Msg("gateway simulator serving")
	if out := buf.String(); strings.Contains(out, "\x1b[") || !strings.Contains(out, "gateway simulator serving") {
		t.Fatalf("log line %q: want plain text", out)
	}
}
