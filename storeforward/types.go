package storeforward

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/role"
)

// Proposer commits a command through Raft on the leader (the daemon forwards
// from followers) and returns the FSM's result. An error means the command's
// fate is unknown or it was not committed (no leader, no quorum, timeout);
// a deterministic refusal comes back as Result.Err.
type Proposer interface {
	Propose(ctx context.Context, cmd *fsmpb.Command) (*fsm.Result, error)
}

// Reader is the FSM read side this package needs; *fsm.FSM satisfies it.
type Reader interface {
	SFPending(target string, afterSeq uint64, limit int) ([]fsm.Message, error)
	SFParked(target string, limit int) ([]fsm.Message, error)
	SFStats() (map[string]fsm.TargetStats, error)
	// Changes delivers the applied index after every applied batch,
	// coalesced; it carries the current index at once.
	Changes() (<-chan uint64, func())
	// Restores counts the snapshots that have replaced the state; a
	// delivery cursor is void once it moves.
	Restores() uint64
}

// RoleSource is the role stream; *role.Broadcaster satisfies it.
type RoleSource interface {
	Current() role.State
	Watch() (<-chan role.State, func())
}

// TargetLookup answers which targets exist now; *Deliverer satisfies it
// (it holds the configured targets on every node, Active or not).
type TargetLookup interface {
	Target(name string) (Target, bool)
	TargetNames() []string
}

// TimeOrderedID returns the default generated message id: 8 bytes of the
// time in nanoseconds since 1970 (big-endian) and 8 random bytes, in hex.
// Ids made later sort later, so the replicated id index takes them at its
// right edge, a few pages per commit, where random ids dirtied a page each.
func TimeOrderedID(now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixNano()))
	_, _ = rand.Read(b[8:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// defaultJitter draws from the goroutine-safe global generator.
func defaultJitter() float64 { return mathrand.Float64() }

// Header is one message header.
type Header = fsm.Header

// Message is a pending or parked message as the FSM stores it.
type Message = fsm.Message

// Reserved headers are set by delivery itself and may not be configured or
// enqueued.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderEpoch          = "X-Scadad-Epoch"
)

func reservedHeader(name string) bool {
	return strings.EqualFold(name, HeaderIdempotencyKey) || strings.EqualFold(name, HeaderEpoch)
}

// Defaults of a Target's zero fields.
const (
	DefaultTimeout         = 10 * time.Second
	DefaultBackoffFloor    = 500 * time.Millisecond
	DefaultBackoffMax      = 5 * time.Minute
	DefaultMaxPayloadBytes = 1 << 20
	DefaultBatchMaxBytes   = 4 << 20
	// MaxBatchMessages bounds a target's BatchMaxMessages.
	MaxBatchMessages = 10000
)

// Target is one delivery endpoint. The daemon maps siteconfig.Target to it.
// Zero durations and limits take the defaults above.
type Target struct {
	Name string
	// Kind names the Kind that delivers (KindHTTP when empty).
	Kind string
	// Settings are the kind's own settings (a comparable value the kind
	// defines: a change restarts the target's worker); nil for HTTP.
	Settings any
	// URL is the http(s) endpoint messages are POSTed to (HTTP only).
	URL string
	// Headers are added to every delivery; a message's own headers win.
	Headers map[string]string
	// Timeout bounds one delivery attempt, answer included.
	Timeout time.Duration
	// BackoffFloor and BackoffMax bound the wait after a failed attempt.
	BackoffFloor time.Duration
	BackoffMax   time.Duration
	// MaxAttempts failed attempts park a message; 0 (or less) never
	// parks one for failing (only a permanent refusal does): a target
	// down for a week finds every message waiting.
	MaxAttempts int
	// MaxPayloadBytes rejects larger messages at enqueue (at most
	// fsm.MaxPayloadBytes).
	MaxPayloadBytes int
	// MaxInFlight is how many deliveries may be under way at once
	// (default 1: strictly one after another, in enqueue order). More are
	// started in enqueue order but may complete out of it.
	MaxInFlight int
	// CAFile is a PEM file of the CAs an https target's certificate must
	// chain to, instead of the system's roots. Read when a delivery worker
	// first needs it, and again after a failed read.
	CAFile string
	// MaxPending caps the messages the target may hold pending; 0 sets
	// none. Enqueues beyond it get a TargetFullError.
	MaxPending int
	// BatchMaxMessages and BatchMaxBytes bound one delivery of several
	// messages (taken in FIFO order from what is pending, never waited
	// for); 1 (the default) delivers one message at a time. BatchFormat
	// is the HTTP batch body (BatchJSON, the default, or BatchNDJSON).
	BatchMaxMessages int
	BatchMaxBytes    int
	BatchFormat      string
	// ParkOn replaces the kind's judgement of which answers park a message
	// at once: answer codes or patterns ("400", "4xx"), or ParkOnNone.
	// Empty: the kind's default (HTTP: 4xx except 408, 425 and 429).
	ParkOn []string
}

// withDefaults fills zero fields.
func (t Target) withDefaults() Target {
	if t.Timeout <= 0 {
		t.Timeout = DefaultTimeout
	}
	if t.BackoffFloor <= 0 {
		t.BackoffFloor = DefaultBackoffFloor
	}
	if t.BackoffMax <= 0 {
		t.BackoffMax = DefaultBackoffMax
	}
	if t.BackoffMax < t.BackoffFloor {
		t.BackoffMax = t.BackoffFloor
	}
	if t.MaxPayloadBytes <= 0 {
		t.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if t.MaxInFlight <= 0 {
		t.MaxInFlight = 1
	}
	if t.BatchMaxMessages <= 0 {
		t.BatchMaxMessages = 1
	}
	if t.BatchMaxBytes <= 0 {
		t.BatchMaxBytes = DefaultBatchMaxBytes
	}
	if t.BatchFormat == "" {
		t.BatchFormat = BatchJSON
	}
	return t
}

// validate checks what every kind shares; the kind checks the rest.
func (t Target) validate() error {
	if t.Name == "" || len(t.Name) > fsm.MaxIDBytes {
		return fmt.Errorf("target name %q: want 1..%d bytes", t.Name, fsm.MaxIDBytes)
	}
	if t.MaxPayloadBytes > fsm.MaxPayloadBytes {
		return fmt.Errorf("target %s: max payload %d bytes is above the buffer's limit %d", t.Name, t.MaxPayloadBytes, fsm.MaxPayloadBytes)
	}
	if t.MaxPending < 0 {
		return fmt.Errorf("target %s: max pending %d is negative", t.Name, t.MaxPending)
	}
	if t.BatchMaxMessages > MaxBatchMessages {
		return fmt.Errorf("target %s: batch of %d messages is above the limit %d", t.Name, t.BatchMaxMessages, MaxBatchMessages)
	}
	if err := ValidateParkOn(t.ParkOn); err != nil {
		return fmt.Errorf("target %s: %w", t.Name, err)
	}
	return nil
}

// sameTarget reports whether two configurations deliver identically
// (MaxPending bounds enqueues only).
func sameTarget(a, b Target) bool {
	if a.Name != b.Name || a.URL != b.URL || a.Timeout != b.Timeout || a.BackoffFloor != b.BackoffFloor ||
		a.BackoffMax != b.BackoffMax || a.MaxAttempts != b.MaxAttempts || a.MaxPayloadBytes != b.MaxPayloadBytes ||
		a.MaxInFlight != b.MaxInFlight || a.CAFile != b.CAFile ||
		a.Kind != b.Kind || !reflect.DeepEqual(a.Settings, b.Settings) ||
		a.BatchMaxMessages != b.BatchMaxMessages || a.BatchMaxBytes != b.BatchMaxBytes || a.BatchFormat != b.BatchFormat ||
		len(a.Headers) != len(b.Headers) || !slices.Equal(a.ParkOn, b.ParkOn) {
		return false
	}
	for k, v := range a.Headers {
		if bv, ok := b.Headers[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// StaticTargets is a fixed TargetLookup (tests, tools).
type StaticTargets map[string]Target

// Target implements TargetLookup.
func (s StaticTargets) Target(name string) (Target, bool) {
	t, ok := s[name]
	if ok {
		t = t.withDefaults()
	}
	return t, ok
}

// TargetNames implements TargetLookup.
func (s StaticTargets) TargetNames() []string {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Errors. Each typed error names what was refused so an API can map it to
// a status code.
var (
	// ErrUnavailable: the command could not be committed (no leader, no
	// quorum, timeout). For an enqueue the outcome is unknown: retry with
	// the same id.
	ErrUnavailable = errors.New("store-and-forward unavailable: no leader or quorum")
	// ErrClosed: the Enqueuer was closed.
	ErrClosed = errors.New("store-and-forward enqueuer closed")
	// ErrInvalid: the message or request is malformed.
	ErrInvalid = errors.New("invalid store-and-forward request")
)

// UnknownTargetError is returned for a target that is not configured.
type UnknownTargetError struct {
	Target string
	Known  []string
}

func (e *UnknownTargetError) Error() string {
	return fmt.Sprintf("unknown store-and-forward target %q (known: %s)", e.Target, strings.Join(e.Known, ", "))
}

// TargetFullError is returned for a message to a target that already holds
// its MaxPending messages.
type TargetFullError struct {
	Target  string
	Pending uint64
	Limit   int
}

func (e *TargetFullError) Error() string {
	return fmt.Sprintf("target %s holds %d messages waiting for delivery, its max_pending is %d: refused until deliveries catch up", e.Target, e.Pending, e.Limit)
}

// PayloadTooLargeError is returned for a payload above the target's limit.
type PayloadTooLargeError struct {
	Target string
	Size   int
	Limit  int
}

func (e *PayloadTooLargeError) Error() string {
	return fmt.Sprintf("payload of %d bytes exceeds target %s's limit of %d bytes", e.Size, e.Target, e.Limit)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
