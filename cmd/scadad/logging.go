package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"gopkg.in/natefinch/lumberjack.v2"

	"github.com/scadad/scadad/internal/tty"
	"github.com/scadad/scadad/nodeconfig"
	"github.com/scadad/scadad/winsvc"
)

// logOutputs are where the process log can go besides the rotated file.
type logOutputs struct {
	// stderr is nil under the Windows service manager, which gives the
	// process nowhere to write it.
	stderr io.Writer
	// events gets the warnings and errors (the Windows Event Log); nil
	// when not under the service manager.
	events winsvc.Sink
}

// openLog builds the process logger from the node config's log section:
// stderr in log.format, the rotated JSON log file (log.file; always under
// the service manager), and the Event Log. The returned function closes
// the file.
func openLog(cfg *nodeconfig.Config, out logOutputs) (zerolog.Logger, func() error, error) {
	var writers []io.Writer
	if out.stderr != nil {
		writers = append(writers, formatted(out.stderr, cfg.Log.Format))
	}
	closeFile := func() error { return nil }
	if path := cfg.LogFilePath(out.stderr == nil); path != "" {
		f, err := openLogFile(path, cfg.Log.File)
		if err != nil {
			return zerolog.Nop(), nil, err
		}
		writers = append(writers, f)
		closeFile = f.Close
	}
	if out.events != nil {
		writers = append(writers, winsvc.EventWriter{Sink: out.events})
	}
	log, err := newLogger(zerolog.MultiLevelWriter(writers...), cfg.Log.Level, cfg.NodeID)
	if err != nil {
		_ = closeFile()
		return zerolog.Nop(), nil, err
	}
	return log, closeFile, nil
}

// openLogFile opens the rotated log file through lumberjack, which renames
// it with its time at MaxSizeMiB and prunes the renamed ones by count and
// age. It is opened here, not at the first line, so that a folder scadad
// cannot write to stops the start with its name.
func openLogFile(path string, c nodeconfig.LogFile) (*lumberjack.Logger, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("log.file.path: %w", err)
	}
	f := &lumberjack.Logger{Filename: path, MaxSize: c.MaxSizeMiB, MaxBackups: c.MaxBackups, MaxAge: c.MaxAgeDays}
	if _, err := f.Write(nil); err != nil {
		return nil, fmt.Errorf("log.file.path %s: %w", path, err)
	}
	return f, nil
}

// formatted is w in log.format: console lines are readable, and coloured
// only where a person reads them; in a file or a journal colour codes are
// noise around every field.
func formatted(w io.Writer, format string) io.Writer {
	if format == "console" {
		return zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339Nano, NoColor: !tty.Is(w)}
	}
	return w
}

// logTimeFormat is the "time" field of every log line: RFC 3339 with
// milliseconds.
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// newLogger is the process logger on w at level.
func newLogger(w io.Writer, level, nodeID string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		return zerolog.Nop(), fmt.Errorf("log.level: %w", err)
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
