package winsvc

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/rs/zerolog"
)

// Sink is where Event Log records go: *eventlog.Log on Windows, a
// recorder in the tests. Each method writes one record of its type.
type Sink interface {
	Info(eventID uint32, msg string) error
	Warning(eventID uint32, msg string) error
	Error(eventID uint32, msg string) error
}

// Event IDs of scadad's records, so that an operator (or a monitoring
// agent) can filter for them.
const (
	EventStarted uint32 = 1
	EventStopped uint32 = 2
	EventFatal   uint32 = 3
	EventWarning uint32 = 10
	EventError   uint32 = 11
)

// maxEventBytes bounds one record's text: the Event Log takes 31,839
// characters, and a record is for a person to read, the log file has the rest.
const maxEventBytes = 8 << 10

// EventWriter is a zerolog.LevelWriter that copies warnings and errors to
// the Event Log and drops every other line (the log file has them all).
// A record the Event Log refuses is dropped too: logging must not stop
// because the Event Log is full.
type EventWriter struct{ Sink Sink }

// Write takes lines without a level (zerolog's Log()): not for the Event Log.
func (w EventWriter) Write(p []byte) (int, error) { return len(p), nil }

// WriteLevel copies p to the Event Log if its level is warn or above.
func (w EventWriter) WriteLevel(l zerolog.Level, p []byte) (int, error) {
	switch l {
	case zerolog.WarnLevel:
		_ = w.Sink.Warning(EventWarning, EventText(p))
	case zerolog.ErrorLevel, zerolog.FatalLevel, zerolog.PanicLevel:
		_ = w.Sink.Error(EventError, EventText(p))
	}
	return len(p), nil
}

// EventText turns one JSON log line into what the Event Viewer shows: the
// message first, then the other fields as key=value in name order (time
// and level are the record's own). A line that is not JSON is kept as it is.
func EventText(line []byte) string {
	var fields map[string]any
	if err := json.Unmarshal(line, &fields); err != nil {
		return truncate(strings.TrimSpace(string(line)))
	}
	var b strings.Builder
	if m, ok := fields["message"].(string); ok {
		b.WriteString(m)
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		switch k {
		case "message", "time", "level":
		default:
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		v := fields[k]
		if s, ok := v.(string); ok {
			fmt.Fprintf(&b, "%s=%s", k, s)
		} else {
			enc, _ := json.Marshal(v)
			fmt.Fprintf(&b, "%s=%s", k, enc)
		}
	}
	return truncate(b.String())
}

func truncate(s string) string {
	if len(s) <= maxEventBytes {
		return s
	}
	cut := maxEventBytes
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + " … (truncated; the log file has the whole line)"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// Discard is a Sink that drops every record: the service runs without an
// Event Log source (registered by hand, without `scadad service install`).
type Discard struct{}

// Info implements Sink.
func (Discard) Info(uint32, string) error { return nil }

// Warning implements Sink.
func (Discard) Warning(uint32, string) error { return nil }

// Error implements Sink.
func (Discard) Error(uint32, string) error { return nil }
