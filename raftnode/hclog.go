package raftnode

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rs/zerolog"
)

// hclogAdapter routes raft's hclog output into zerolog, keeping levels and
// turning hclog's key/value pairs into fields.
type hclogAdapter struct {
	zl      zerolog.Logger
	name    string
	implied []interface{}
	level   *atomic.Int32 // shared by the adapter and the loggers derived from it
	repeats *repeats      // shared likewise
}

// repeatEvery is how often one of raft's per-attempt complaints about one
// peer is logged while it goes on.
const repeatEvery = 10 * time.Second

// repeated are raft's complaints it makes on every attempt while a peer is
// down: 4 heartbeats a second and every append and vote. The first is
// logged; the same one about the same peer again only once repeatEvery
// has passed, with how many were left out meanwhile.
var repeated = []string{
	"failed to heartbeat to",
	"failed to appendEntries to",
	"failed to make requestVote RPC",
	"failed to contact",
	"failed to send snapshot to",
}

// repeats remembers, per complaint and peer, when it was last logged and
// how many have been left out since.
type repeats struct {
	now  func() time.Time
	mu   sync.Mutex
	last map[string]time.Time
	held map[string]int
}

// admit reports whether a complaint with key may be logged now, and how
// many of it were held back since it last was.
func (r *repeats) admit(key string) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if last, ok := r.last[key]; ok && now.Sub(last) < repeatEvery {
		r.held[key]++
		return false, 0
	}
	held := r.held[key]
	r.last[key], r.held[key] = now, 0
	return true, held
}

// repeatKey is the complaint and peer a message is about, or "" when it is
// not one of raft's per-attempt complaints.
func repeatKey(msg string, args []interface{}) string {
	for _, r := range repeated {
		if !strings.HasPrefix(msg, r) {
			continue
		}
		key := r
		for i := 0; i+1 < len(args); i += 2 {
			if k := fmt.Sprint(args[i]); k == "peer" || k == "target" || k == "id" {
				key += " " + fmt.Sprint(args[i+1])
			}
		}
		return key
	}
	return ""
}

// routine are raft messages logged as errors that report a normal event,
// with the level they are logged at instead.
var routine = map[string]hclog.Level{
	// A leader learning of a newer term and stepping down: every election
	// elsewhere, and every time the witness hands leadership on.
	"peer has newer term, stopping replication": hclog.Info,
}

// closingOwnConnection reports raft's transport failing to read from a
// connection this node closed itself.
func closingOwnConnection(msg string, args []interface{}) bool {
	if msg != "failed to decode incoming command" {
		return false
	}
	for i := 1; i < len(args); i += 2 {
		if err, ok := args[i].(error); ok && errors.Is(err, net.ErrClosed) {
			return true
		}
	}
	return false
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHclogAdapter(zl zerolog.Logger, name string) *hclogAdapter {
	lvl := &atomic.Int32{}
	lvl.Store(int32(hclogLevel(zl.GetLevel())))
	return &hclogAdapter{zl: zl, name: name, level: lvl, repeats: newRepeats(time.Now)}
}

func newRepeats(now func() time.Time) *repeats {
	return &repeats{now: now, last: map[string]time.Time{}, held: map[string]int{}}
}

func hclogLevel(l zerolog.Level) hclog.Level {
	switch {
	case l <= zerolog.TraceLevel:
		return hclog.Trace
	case l == zerolog.DebugLevel:
		return hclog.Debug
	case l == zerolog.InfoLevel:
		return hclog.Info
	case l == zerolog.WarnLevel:
		return hclog.Warn
	case l == zerolog.Disabled:
		return hclog.Off
	default:
		return hclog.Error
	}
}

func zerologLevel(l hclog.Level) zerolog.Level {
	switch l {
	case hclog.Trace:
		return zerolog.TraceLevel
	case hclog.Debug:
		return zerolog.DebugLevel
	case hclog.Warn:
		return zerolog.WarnLevel
	case hclog.Error:
		return zerolog.ErrorLevel
	default:
		return zerolog.InfoLevel
	}
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...interface{}) {
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	if level == hclog.Off || level < hclog.Level(a.level.Load()) {
		return
	}
	if level == hclog.Error {
		if l, ok := routine[msg]; ok {
			level = l
		} else if closingOwnConnection(msg, args) {
			// Raft's transport closing its own connections as the node
			// stops: routine (three of them on every clean stop).
			level = hclog.Debug
		}
		if level < hclog.Level(a.level.Load()) {
			return
		}
	}
	held := 0
	if key := repeatKey(msg, args); key != "" && a.repeats != nil {
		var ok bool
		if ok, held = a.repeats.admit(key); !ok {
			return
		}
	}
	ev := a.zl.WithLevel(zerologLevel(level))
	if ev == nil {
		return
	}
	if held > 0 {
		ev = ev.Int("same_since_last_logged", held)
	}
	if a.name != "" {
		ev = ev.Str("logger", a.name)
	}
	ev = addFields(ev, a.implied)
	ev = addFields(ev, args)
	ev.Msg(msg)
}

// raftKey renames a key raft uses that our own loggers already carry: raft
// logs "node" as its String() ("Node at ADDR [Candidate]"), and a second
// node key would make log tools attribute the line to no node.
func raftKey(key string) string {
	if key == "node" {
		return "raft_node"
	}
	return key
}

func addFields(ev *zerolog.Event, args []interface{}) *zerolog.Event {
	for i := 0; i < len(args); i += 2 {
		key := raftKey(fmt.Sprint(args[i]))
		if i+1 >= len(args) {
			ev = ev.Interface("EXTRA_VALUE_AT_END", args[i])
			break
		}
		switch v := args[i+1].(type) {
		case hclog.Format:
			if len(v) > 0 {
				if f, ok := v[0].(string); ok {
					ev = ev.Str(key, fmt.Sprintf(f, v[1:]...))
					continue
				}
			}
			ev = ev.Interface(key, []interface{}(v))
		case error:
			ev = ev.AnErr(key, v)
		case fmt.Stringer:
			ev = ev.Str(key, v.String())
		default:
			ev = ev.Interface(key, v)
		}
	}
	return ev
}

func (a *hclogAdapter) Trace(msg string, args ...interface{}) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...interface{}) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...interface{})  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...interface{})  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...interface{}) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) IsTrace() bool { return a.GetLevel() <= hclog.Trace }
func (a *hclogAdapter) IsDebug() bool { return a.GetLevel() <= hclog.Debug }
func (a *hclogAdapter) IsInfo() bool  { return a.GetLevel() <= hclog.Info }
func (a *hclogAdapter) IsWarn() bool  { return a.GetLevel() <= hclog.Warn }
func (a *hclogAdapter) IsError() bool { return a.GetLevel() <= hclog.Error }

func (a *hclogAdapter) ImpliedArgs() []interface{} { return a.implied }

func (a *hclogAdapter) With(args ...interface{}) hclog.Logger {
	c := *a
	c.implied = append(append([]interface{}{}, a.implied...), args...)
	return &c
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	c := *a
	if c.name != "" {
		c.name = c.name + "." + name
	} else {
		c.name = name
	}
	return &c
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	c := *a
	c.name = name
	return &c
}

func (a *hclogAdapter) SetLevel(level hclog.Level) { a.level.Store(int32(level)) }
func (a *hclogAdapter) GetLevel() hclog.Level      { return hclog.Level(a.level.Load()) }

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *hclogAdapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	w := &stdWriter{a: a, level: hclog.Info}
	if opts != nil {
		w.infer = opts.InferLevels || opts.InferLevelsWithTimestamp
		if opts.ForceLevel != hclog.NoLevel {
			w.level = opts.ForceLevel
		}
	}
	return w
}

// stdWriter adapts standard-library log lines ("[WARN] raft: ...") to the
// adapter, inferring the level from the bracketed prefix when asked.
type stdWriter struct {
	a     *hclogAdapter
	level hclog.Level
	infer bool
}

func (w *stdWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimRight(p, "\r\n"))
	level := w.level
	if w.infer {
		for _, pfx := range []struct {
			tag string
			lvl hclog.Level
		}{{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info}, {"[WARN]", hclog.Warn}, {"[ERR]", hclog.Error}, {"[ERROR]", hclog.Error}} {
			if i := strings.Index(line, pfx.tag); i >= 0 {
				level = pfx.lvl
				line = strings.TrimSpace(line[i+len(pfx.tag):])
				break
			}
		}
	}
	w.a.Log(level, line)
	return len(p), nil
}
