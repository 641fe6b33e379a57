package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/tty"
)

// newLogger builds the process logger from the node config's log section.
func newLogger(w io.Writer, level, format, nodeID string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		return zerolog.Nop(), fmt.Errorf("log.level: %w", err)
	}
	if format == "console" {
		// Colour codes only where a person reads them; in a file or a
		// journal they are noise around every field.
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339Nano, NoColor: !tty.Is(w)}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("node", nodeID).Logger(), nil
}

// stdlogWriter carries what libraries print through the standard log
// package (gopcua's "Started listening", for one) into the node's log at
// debug level instead of raw lines on stderr.
type stdlogWriter struct{ log zerolog.Logger }

func (w stdlogWriter) Write(p []byte) (int, error) {
	w.log.Debug().Msg(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
