package main

import (
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"
)

// newLogger builds the process logger from the node config's log section.
func newLogger(w io.Writer, level, format, nodeID string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		return zerolog.Nop(), fmt.Errorf("log.level: %w", err)
	}
	if format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339Nano}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("node", nodeID).Logger(), nil
}
