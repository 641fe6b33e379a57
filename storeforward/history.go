package storeforward

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/field"
	"github.com/scadad/scadad/internal/backoff"
	"github.com/scadad/scadad/internal/clock"
	"github.com/scadad/scadad/internal/numeric"
	"github.com/scadad/scadad/role"
)

// HistoryRule forwards values of selected attributes to a target through
// the buffer. The daemon maps siteconfig.HistoryRule to it.
type HistoryRule struct {
	Name   string
	Target string
	// Select lists the instances (and optionally attributes) forwarded;
	// empty forwards everything.
	Select []HistorySelector
	// SampleInterval 0 forwards every change as it arrives (site config
	// mode on_change). Above 0 the rule samples (mode sample): every
	// SampleInterval it forwards the latest value of each selected
	// attribute seen so far, changed or not, with the sample time in
	// SampledAt.
	SampleInterval time.Duration
	// Deadband is an absolute deadband on numeric values: a value within it
	// of the last forwarded one (same quality) is not forwarded. 0 forwards
	// every change, or in sample mode every attribute at every sample.
	Deadband float64
	// MaxBatch is the most values in one message (default 100);
	// MaxBatchDelay the longest a value waits for its batch (default 1 s).
	MaxBatch      int
	MaxBatchDelay time.Duration
	// Format is how a batch is encoded: HistoryJSON (the default) or
	// HistorySparkplug.
	Format string
}

// The history message formats (HistoryRule.Format).
const (
	// HistoryJSON is a HistoryPayload as JSON.
	HistoryJSON = "json"
	// HistorySparkplug is a Sparkplug B payload (Eclipse Tahu's
	// sparkplug_b.proto) with one metric per value named
	// "<instance>/<attribute>", for a Sparkplug target to publish as its
	// devices' DDATA.
	HistorySparkplug = "sparkplug"
)

// HistorySelector picks attributes of one instance; no attributes means all.
type HistorySelector struct {
	Instance   string
	Attributes []string
}

func (r HistoryRule) selects(instance, attribute string) bool {
	if len(r.Select) == 0 {
		return true
	}
	for _, s := range r.Select {
		if s.Instance != instance {
			continue
		}
		if len(s.Attributes) == 0 {
			return true
		}
		for _, a := range s.Attributes {
			if a == attribute {
				return true
			}
		}
	}
	return false
}

// TagUpdate is one value of one attribute.
type TagUpdate struct {
	Instance  string
	Attribute string
	Value     any
	Quality   string
	Timestamp time.Time
}

// HistoryValue is one value in a forwarded message.
type HistoryValue struct {
	Instance  string    `json:"instance"`
	Attribute string    `json:"attribute"`
	Value     any       `json:"value"`
	Quality   string    `json:"quality"`
	Timestamp time.Time `json:"timestamp"`
	// SampledAt is when a sampling rule took the value; absent for values
	// forwarded on change.
	SampledAt time.Time `json:"sampled_at,omitzero"`
}

// HistoryPayload is the JSON body of a forwarded message.
type HistoryPayload struct {
	Rule   string         `json:"rule"`
	Values []HistoryValue `json:"values"`
}

// MessageEnqueuer is what the forwarder needs of an Enqueuer.
type MessageEnqueuer interface {
	Enqueue(ctx context.Context, target string, payload []byte, id string, headers []Header) (EnqueueResult, error)
}

// HistoryOptions configure NewHistoryForwarder.
type HistoryOptions struct {
	Enqueuer MessageEnqueuer // required (an *Enqueuer)
	Rules    []HistoryRule
	// Buffer bounds the updates waiting to be taken in and the values of
	// batches waiting for a retry; beyond it updates are dropped and
	// counted. Default 100 000.
	Buffer int
	// RetryFloor and RetryMax bound the wait before re-enqueueing a batch
	// whose enqueue failed. Defaults 100 ms and 10 s.
	RetryFloor, RetryMax time.Duration
	// Roles says whether this node forwards history now: while it leads
	// (role.State.Leading: Active, or Active with its quorum
	// confirmation late for a moment, which its enqueues wait out). A
	// sampling rule samples only while it does and forgets the values it
	// holds when it does not, so a node that becomes Active again samples
	// only values it received since. Nil means always.
	Roles CurrentRole
	// Metrics counts forwarded and dropped values (nil: none).
	Metrics *Metrics
	Clock   clock.Clock
	Jitter  func() float64
	Logger  zerolog.Logger
}

// Why history values were dropped (label reason of
// scadad_history_values_dropped_total).
const (
	dropBufferFull    = "buffer_full"    // Offer found the intake full
	dropRetryOverflow = "retry_overflow" // batches waiting for a retry exceeded Buffer
	dropEncode        = "encode"         // a batch could not be encoded
	dropTooLarge      = "too_large"      // one value alone is over the target's payload limit
	dropInvalid       = "invalid"        // the buffer refused a batch as malformed
	dropStopped       = "stopped"        // still unsent when the forwarder stopped
)

// dropLogEvery bounds how often dropped values are logged; every drop is
// counted.
const dropLogEvery = 10 * time.Second

// HistoryForwarder batches tag updates per rule into JSON messages and
// enqueues them. A batch whose enqueue fails is retried with the same
// message id (derived from its content), so a retry after an unknown
// outcome is stored once.
type HistoryForwarder struct {
	opts    HistoryOptions
	updates chan TagUpdate
	dropped atomic.Uint64
	sent    atomic.Uint64
	taken   atomic.Uint64

	// loggedDrops and lastDropLog (unix nanos) rate-limit the drop log.
	loggedDrops atomic.Uint64
	lastDropLog atomic.Int64
}

// NewHistoryForwarder validates the rules; Run does the work.
func NewHistoryForwarder(opts HistoryOptions) (*HistoryForwarder, error) {
	if opts.Enqueuer == nil {
		return nil, errors.New("new history forwarder: Enqueuer is required")
	}
	seen := map[string]bool{}
	for i, r := range opts.Rules {
		if r.Name == "" || r.Target == "" {
			return nil, fmt.Errorf("new history forwarder: rule %d needs a name and a target", i)
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("new history forwarder: rule %s listed twice", r.Name)
		}
		seen[r.Name] = true
		if r.Deadband < 0 || math.IsNaN(r.Deadband) {
			return nil, fmt.Errorf("new history forwarder: rule %s: deadband %v", r.Name, r.Deadband)
		}
		if r.SampleInterval < 0 {
			return nil, fmt.Errorf("new history forwarder: rule %s: sample interval %s", r.Name, r.SampleInterval)
		}
		switch r.Format {
		case "":
			opts.Rules[i].Format = HistoryJSON
		case HistoryJSON, HistorySparkplug:
		default:
			return nil, fmt.Errorf("new history forwarder: rule %s: format %q, want %s or %s", r.Name, r.Format, HistoryJSON, HistorySparkplug)
		}
		if r.MaxBatch <= 0 {
			opts.Rules[i].MaxBatch = 100
		}
		if r.MaxBatchDelay <= 0 {
			opts.Rules[i].MaxBatchDelay = time.Second
		}
	}
	if opts.Buffer <= 0 {
		opts.Buffer = 100_000
	}
	if opts.RetryFloor <= 0 {
		opts.RetryFloor = 100 * time.Millisecond
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = 10 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.System()
	}
	if opts.Jitter == nil {
		opts.Jitter = defaultJitter
	}
	return &HistoryForwarder{opts: opts, updates: make(chan TagUpdate, opts.Buffer)}, nil
}

// CurrentRole is the role a history forwarder follows; a role.Source
// (the daemon's acting view) satisfies it.
type CurrentRole interface {
	Current() role.State
}

// leading reports whether the node forwards history now (Roles).
func (h *HistoryForwarder) leading() bool {
	return h.opts.Roles == nil || h.opts.Roles.Current().Leading()
}

// Offer hands an update over without blocking; false means the buffer was
// full and the update was dropped (counted in Dropped).
func (h *HistoryForwarder) Offer(u TagUpdate) bool {
	select {
	case h.updates <- u:
		return true
	default:
		h.drop(1, dropBufferFull)
		return false
	}
}

// OfferUpdate is Offer for a value in the field vocabulary, the way the
// daemon's fan-out (field.Fanout) hands values over; history records the
// quality word's name.
func (h *HistoryForwarder) OfferUpdate(u field.Update) bool {
	return h.Offer(TagUpdate{Instance: u.Instance, Attribute: u.Attribute, Value: u.Value, Quality: u.Quality.String(), Timestamp: u.Timestamp})
}

// drop counts n dropped values and logs, at most every dropLogEvery, how
// many were dropped since the last log. It must not block: Offer calls it
// on the subscribe workers' path.
func (h *HistoryForwarder) drop(n int, reason string) { h.dropFor(n, reason, nil) }

// dropFor is drop with the error behind the drop, if any, for the log.
func (h *HistoryForwarder) dropFor(n int, reason string, cause error) {
	total := h.dropped.Add(uint64(n))
	h.opts.Metrics.observeHistoryDropped(reason, n)
	now := h.opts.Clock.Now().UnixNano()
	last := h.lastDropLog.Load()
	if last != 0 && now-last < int64(dropLogEvery) || !h.lastDropLog.CompareAndSwap(last, now) {
		return
	}
	since := total - h.loggedDrops.Swap(total)
	h.opts.Logger.Warn().Err(cause).Uint64("dropped", since).Uint64("dropped_total", total).Str("reason", reason).
		Msg("tag history values dropped: the forwarder cannot keep up or the buffer refuses enqueues; see scadad_history_values_dropped_total")
}

// Dropped is how many updates were dropped (intake full, too many waiting
// for a retry, or unencodable).
func (h *HistoryForwarder) Dropped() uint64 { return h.dropped.Load() }

// Sent is how many batches were enqueued.
func (h *HistoryForwarder) Sent() uint64 { return h.sent.Load() }

// Taken is how many offered updates Run has looked at, whether or not a
// rule kept them.
func (h *HistoryForwarder) Taken() uint64 { return h.taken.Load() }

type ruleState struct {
	rule     HistoryRule
	values   []HistoryValue
	deadline time.Time
	last     map[[2]string]lastValue

	// Sample mode: the newest update of each attribute, in the order the
	// attributes were first seen, and when the next sample is due.
	latest     map[[2]string]TagUpdate
	order      [][2]string
	nextSample time.Time
}

type lastValue struct {
	number  float64
	numeric bool
	quality string
}

type readyBatch struct {
	rule    HistoryRule
	id      string
	payload []byte
	values  int
	// contentType is the format's media type.
	contentType string
}

// historyFinalFlush bounds the last enqueue of a stopping forwarder.
const historyFinalFlush = 2 * time.Second

// Run takes updates in until ctx ends. It then enqueues the values still
// batched, once, within historyFinalFlush (a deploy that changes the rules
// replaces the forwarder, and the node stops or hands over); what fails
// then is dropped and counted: a new forwarder starts from the current
// values.
func (h *HistoryForwarder) Run(ctx context.Context) error {
	// sendCtx is what enqueues run under: ctx, then the final flush's.
	sendCtx := ctx
	rules := make([]*ruleState, len(h.opts.Rules))
	for i, r := range h.opts.Rules {
		rules[i] = &ruleState{rule: r, last: make(map[[2]string]lastValue)}
		if r.SampleInterval > 0 {
			rules[i].latest = make(map[[2]string]TagUpdate)
			rules[i].nextSample = h.opts.Clock.Now().Add(r.SampleInterval)
		}
	}
	var (
		// queue holds batches in order, waiting to be enqueued: more
		// than one only while the head waits for a retry.
		queue    []readyBatch
		failures int
		retryAt  time.Time
		timer    <-chan time.Time
		timerAt  time.Time
		clock    = h.opts.Clock
	)
	// queuedValues counts the values in queue; the gauge follows it.
	queuedValues := 0
	queued := func(n int) {
		queuedValues += n
		h.opts.Metrics.observeHistoryWaiting(n)
	}
	defer func() { queued(-queuedValues) }()
	// attempt enqueues the batch at the head of queue. A refusal that no
	// retry can change does not hold the batches behind it: a batch over
	// the target's payload limit is split in two (down to single values,
	// which are dropped), a malformed one dropped; both are counted and
	// logged. Anything else (no quorum, a full disk, a target at its
	// max_pending) waits for a retry.
	attempt := func() bool {
		b := queue[0]
		_, err := h.opts.Enqueuer.Enqueue(sendCtx, b.rule.Target, b.payload, b.id, []Header{{Key: "Content-Type", Value: b.contentType}})
		var tooLarge *PayloadTooLargeError
		switch {
		case err == nil:
			h.sent.Add(1)
			h.opts.Metrics.observeHistorySent(b.rule.Name, b.values)
			queue = queue[1:]
		case errors.As(err, &tooLarge) && b.values > 1:
			halves, serr := splitHistory(b)
			if serr != nil {
				h.opts.Logger.Error().Err(serr).Str("rule", b.rule.Name).Msg("split tag history batch; dropped")
				h.drop(b.values, dropEncode)
				queue = queue[1:]
				break
			}
			h.opts.Logger.Debug().Str("rule", b.rule.Name).Int("values", b.values).Int("limit", tooLarge.Limit).
				Msg("tag history batch over the target's payload limit; sending it in two halves")
			queue = append(halves[:], queue[1:]...)
			return true
		case errors.As(err, &tooLarge):
			// One value alone over the limit: raise the target's
			// max_payload_bytes to keep such values.
			h.dropFor(b.values, dropTooLarge, fmt.Errorf("rule %s: one value: %w", b.rule.Name, err))
			queue = queue[1:]
		case errors.Is(err, ErrInvalid):
			h.dropFor(b.values, dropInvalid, fmt.Errorf("rule %s: %w", b.rule.Name, err))
			queue = queue[1:]
		default:
			if sendCtx.Err() == nil {
				h.opts.Logger.Warn().Err(err).Str("rule", b.rule.Name).Int("values", b.values).Msg("forward tag history; will retry")
			}
			return false
		}
		queued(-b.values)
		return true
	}
	// drain enqueues the queue in order until it is empty or an attempt
	// fails; then the head waits for a retry.
	drain := func() {
		for len(queue) > 0 {
			if !attempt() {
				failures++
				retryAt = clock.Now().Add(backoff.Delay(h.opts.RetryFloor, h.opts.RetryMax, failures, h.opts.Jitter()))
				return
			}
		}
		failures = 0
	}
	flush := func(rs *ruleState) {
		if len(rs.values) == 0 {
			return
		}
		b, err := encodeHistory(rs.rule, rs.values)
		rs.values, rs.deadline = nil, time.Time{}
		if err != nil {
			h.opts.Logger.Error().Err(err).Str("rule", rs.rule.Name).Msg("encode tag history batch; dropped")
			h.drop(b.values, dropEncode)
			return
		}
		// Keep order: once a batch waits for a retry, later ones queue
		// behind it.
		waitingBefore := len(queue) > 0
		queue = append(queue, b)
		queued(b.values)
		if !waitingBefore {
			drain()
		}
		for queuedValues > h.opts.Buffer && len(queue) > 1 {
			h.drop(queue[0].values, dropRetryOverflow)
			queued(-queue[0].values)
			queue = queue[1:]
		}
	}
	take := func(u TagUpdate) {
		for _, rs := range rules {
			if !rs.take(u, clock.Now()) {
				continue
			}
			if len(rs.values) >= rs.rule.MaxBatch {
				flush(rs)
			}
		}
		h.taken.Add(1)
	}
	for {
		// Arm one timer for the earliest deadline (batch, sample or retry).
		next := retryAt
		if len(queue) == 0 {
			next = time.Time{}
		}
		for _, rs := range rules {
			for _, at := range [2]time.Time{rs.deadline, rs.nextSample} {
				if !at.IsZero() && (next.IsZero() || at.Before(next)) {
					next = at
				}
			}
		}
		if next.IsZero() {
			timer, timerAt = nil, time.Time{}
		} else if timer == nil || !next.Equal(timerAt) {
			timer, timerAt = clock.After(max(next.Sub(clock.Now()), 0)), next
		}
		select {
		case u := <-h.updates:
			take(u)
		case <-timer:
			timer = nil
			now := clock.Now()
			if len(queue) > 0 && !now.Before(retryAt) {
				drain()
			}
			for _, rs := range rules {
				if !rs.nextSample.IsZero() && !now.Before(rs.nextSample) {
					rs.sample(now, h.leading(), flush)
				}
				if !rs.deadline.IsZero() && !now.Before(rs.deadline) {
					flush(rs)
				}
			}
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), historyFinalFlush)
			defer cancel()
			sendCtx = final
			// Updates offered before the stop and not yet taken in.
			for pending := len(h.updates); pending > 0; pending-- {
				take(<-h.updates)
			}
			for _, rs := range rules {
				flush(rs)
			}
			drain()
			if n := queuedValues; n > 0 {
				h.drop(n, dropStopped)
			}
			return nil
		}
	}
}

// take adds u to the rule's batch when selected and outside the deadband.
// A sampling rule only remembers u for its next sample and reports false.
func (rs *ruleState) take(u TagUpdate, now time.Time) bool {
	if !rs.rule.selects(u.Instance, u.Attribute) {
		return false
	}
	key := [2]string{u.Instance, u.Attribute}
	if rs.latest != nil {
		if _, seen := rs.latest[key]; !seen {
			rs.order = append(rs.order, key)
		}
		rs.latest[key] = u
		return false
	}
	return rs.add(u, key, now, time.Time{})
}

// add appends u to the batch unless the deadband holds it back.
func (rs *ruleState) add(u TagUpdate, key [2]string, now, sampledAt time.Time) bool {
	num, numeric := numeric.Float(u.Value)
	if prev, ok := rs.last[key]; ok && rs.rule.Deadband > 0 && numeric && prev.numeric &&
		prev.quality == u.Quality && math.Abs(num-prev.number) < rs.rule.Deadband {
		return false
	}
	rs.last[key] = lastValue{number: num, numeric: numeric, quality: u.Quality}
	if len(rs.values) == 0 {
		rs.deadline = now.Add(rs.rule.MaxBatchDelay)
	}
	rs.values = append(rs.values, HistoryValue{
		Instance: u.Instance, Attribute: u.Attribute, Value: u.Value, Quality: u.Quality,
		Timestamp: u.Timestamp.UTC(), SampledAt: sampledAt.UTC(),
	})
	return true
}

// sample takes the latest value of every attribute seen into the batch,
// flushing whenever the batch is full, and schedules the next sample.
// Samples missed while the loop was busy are skipped, not made up: a
// burst of identical samples tells a historian nothing. A node that is not
// Active drops what it holds instead.
func (rs *ruleState) sample(now time.Time, active bool, flush func(*ruleState)) {
	if !active {
		clear(rs.latest)
		rs.order = rs.order[:0]
	}
	for _, key := range rs.order {
		if rs.add(rs.latest[key], key, now, now) && len(rs.values) >= rs.rule.MaxBatch {
			flush(rs)
		}
	}
	if !rs.nextSample.After(now) {
		missed := now.Sub(rs.nextSample) / rs.rule.SampleInterval
		rs.nextSample = rs.nextSample.Add((missed + 1) * rs.rule.SampleInterval)
	}
}

// jsonSafe turns the floats JSON cannot carry (NaN, ±Inf) into strings.
func jsonSafe(v any) any {
	if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	if f, ok := v.(float32); ok && (math.IsNaN(float64(f)) || math.IsInf(float64(f), 0)) {
		return strconv.FormatFloat(float64(f), 'g', -1, 32)
	}
	return v
}

// splitHistory re-encodes a batch as two batches of half its values each,
// in order. The payload is decoded with numbers kept as written, so a
// value reads the same in a half as it did in the whole.
func splitHistory(b readyBatch) ([2]readyBatch, error) {
	if b.rule.Format == HistorySparkplug {
		return splitSparkplugHistory(b)
	}
	dec := json.NewDecoder(bytes.NewReader(b.payload))
	dec.UseNumber()
	var p HistoryPayload
	if err := dec.Decode(&p); err != nil {
		return [2]readyBatch{}, fmt.Errorf("decode batch of %d values: %w", b.values, err)
	}
	mid := len(p.Values) / 2
	first, err := encodeHistory(b.rule, p.Values[:mid])
	if err != nil {
		return [2]readyBatch{}, err
	}
	second, err := encodeHistory(b.rule, p.Values[mid:])
	if err != nil {
		return [2]readyBatch{}, err
	}
	return [2]readyBatch{first, second}, nil
}

// encodeHistory makes a batch's message; its id is a digest of the content
// so that re-enqueueing the same batch is a duplicate.
func encodeHistory(rule HistoryRule, values []HistoryValue) (readyBatch, error) {
	if rule.Format == HistorySparkplug {
		return encodeSparkplugHistory(rule, values)
	}
	safe := make([]HistoryValue, len(values))
	for i, v := range values {
		v.Value = jsonSafe(v.Value)
		safe[i] = v
	}
	payload, err := json.Marshal(HistoryPayload{Rule: rule.Name, Values: safe})
	if err != nil {
		return readyBatch{values: len(values)}, fmt.Errorf("encode %d values: %w", len(values), err)
	}
	return historyBatch(rule, payload, len(values), "application/json"), nil
}

// historyBatch names a batch by a digest of its content, so that
// re-enqueueing the same batch is a duplicate.
func historyBatch(rule HistoryRule, payload []byte, values int, contentType string) readyBatch {
	sum := sha256.Sum256(payload)
	return readyBatch{rule: rule, id: "hist-" + rule.Name + "-" + hex.EncodeToString(sum[:16]), payload: payload, values: values, contentType: contentType}
}
