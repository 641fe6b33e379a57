package storeforward

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/clock"
)

// LiveSource gives the in-memory delivery figures; *Deliverer satisfies it.
type LiveSource interface {
	Live() map[string]LiveStats
}

// OperatorOptions configure NewOperator.
type OperatorOptions struct {
	Reader   Reader   // required
	Proposer Proposer // required
	// Targets and Live are optional: without them Stats lists only what
	// the buffer knows and has no delivery rates or errors.
	Targets TargetLookup
	Live    LiveSource
	// Actor is stamped on retry and discard commands (the operator or the
	// node id).
	Actor string
	Clock clock.Clock
}

// Operator implements the control API's store-and-forward functions.
type Operator struct{ opts OperatorOptions }

// NewOperator returns an Operator.
func NewOperator(opts OperatorOptions) (*Operator, error) {
	if opts.Reader == nil || opts.Proposer == nil {
		return nil, errors.New("new operator: Reader and Proposer are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.System()
	}
	return &Operator{opts: opts}, nil
}

// TargetStatus is one target's line of Stats.
type TargetStatus struct {
	Target string
	// Configured is false for a target that has messages in the buffer but
	// is no longer in the site config (its messages wait, undelivered).
	Configured bool
	Pending    uint64
	Parked     uint64
	// Delivered and Discarded are the replicated totals.
	Delivered uint64
	Discarded uint64
	// OldestEnqueue is the enqueue time of the head of the pending queue
	// (zero when empty) and OldestAge its age now.
	OldestEnqueue time.Time
	OldestAge     time.Duration
	// DeliveredPerSec, LastError and HeadAttempts come from this node's
	// delivery workers: zero on a node that is not Active.
	DeliveredPerSec float64
	LastError       string
	LastErrorAt     time.Time
	HeadAttempts    int
}

// Stats returns every target that is configured or has messages, sorted.
func (o *Operator) Stats() ([]TargetStatus, error) {
	stats, err := o.opts.Reader.SFStats()
	if err != nil {
		return nil, fmt.Errorf("s&f stats: %w", err)
	}
	byName := make(map[string]*TargetStatus)
	get := func(name string) *TargetStatus {
		ts, ok := byName[name]
		if !ok {
			ts = &TargetStatus{Target: name}
			byName[name] = ts
		}
		return ts
	}
	now := o.opts.Clock.Now()
	for name, st := range stats {
		ts := get(name)
		ts.Pending, ts.Parked, ts.Delivered, ts.Discarded = st.Pending, st.Parked, st.Delivered, st.Discarded
		ts.OldestEnqueue = st.OldestEnqueue
		if !st.OldestEnqueue.IsZero() {
			ts.OldestAge = max(now.Sub(st.OldestEnqueue), 0)
		}
	}
	if o.opts.Targets != nil {
		for _, name := range o.opts.Targets.TargetNames() {
			get(name).Configured = true
		}
	}
	if o.opts.Live != nil {
		for name, ls := range o.opts.Live.Live() {
			ts := get(name)
			ts.DeliveredPerSec, ts.LastError, ts.LastErrorAt, ts.HeadAttempts = ls.DeliveredPerSec, ls.LastError, ls.LastErrorAt, ls.HeadAttempts
		}
	}
	out := make([]TargetStatus, 0, len(byName))
	for _, ts := range byName {
		out = append(out, *ts)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Target < out[j].Target })
	return out, nil
}

// List returns up to limit pending (FIFO order) or parked (oldest parked
// first) messages of target; an empty target lists every target's, each
// contributing at most limit, trimmed to limit overall.
func (o *Operator) List(target string, parked bool, limit int) ([]Message, error) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, fsm.MaxListLimit)
	targets := []string{target}
	if target == "" {
		stats, err := o.opts.Reader.SFStats()
		if err != nil {
			return nil, fmt.Errorf("s&f list: %w", err)
		}
		targets = targets[:0]
		for name := range stats {
			targets = append(targets, name)
		}
		sort.Strings(targets)
	}
	var out []Message
	for _, t := range targets {
		var (
			msgs []Message
			err  error
		)
		if parked {
			msgs, err = o.opts.Reader.SFParked(t, limit-len(out))
		} else {
			msgs, err = o.opts.Reader.SFPending(t, 0, limit-len(out))
		}
		if err != nil {
			return nil, fmt.Errorf("s&f list %s: %w", t, err)
		}
		out = append(out, msgs...)
		if len(out) >= limit {
			break
		}
	}
	return out, nil
}

// Selection picks parked messages: the listed ids, or every parked message
// of AllOfTarget.
type Selection struct {
	IDs         []string
	AllOfTarget string
}

func (s Selection) validate() error {
	switch {
	case len(s.IDs) > 0 && s.AllOfTarget != "":
		return invalidf("give ids or a target, not both")
	case len(s.IDs) == 0 && s.AllOfTarget == "":
		return invalidf("give ids or a target")
	}
	return nil
}

// MoveResult answers Retry and Discard.
type MoveResult struct {
	Moved int
	// NotParked are requested ids that were not parked (nothing done).
	NotParked []string
}

// Retry moves selected parked messages back to the tail of their pending
// queues with their attempts reset.
func (o *Operator) Retry(ctx context.Context, sel Selection) (MoveResult, error) {
	return o.move(ctx, "retry", sel, func(ids []string, all string) *fsmpb.Command {
		return &fsmpb.Command{Body: &fsmpb.Command_SfRetry{SfRetry: &fsmpb.SFRetry{Ids: ids, AllOfTarget: all}}}
	}, func(r *fsm.Result) *fsm.MoveOutcome { return r.Retry })
}

// Discard drops selected parked messages for good (audited by the FSM); a
// discarded id stays known, so re-enqueueing it is a duplicate.
func (o *Operator) Discard(ctx context.Context, sel Selection, reason string) (MoveResult, error) {
	return o.move(ctx, "discard", sel, func(ids []string, all string) *fsmpb.Command {
		return &fsmpb.Command{Body: &fsmpb.Command_SfDiscard{SfDiscard: &fsmpb.SFDiscard{Ids: ids, AllOfTarget: all, Reason: reason}}}
	}, func(r *fsm.Result) *fsm.MoveOutcome { return r.Discard })
}

func (o *Operator) move(ctx context.Context, what string, sel Selection,
	build func(ids []string, all string) *fsmpb.Command, outcome func(*fsm.Result) *fsm.MoveOutcome) (MoveResult, error) {
	var total MoveResult
	if err := sel.validate(); err != nil {
		return total, fmt.Errorf("s&f %s: %w", what, err)
	}
	step := func(ids []string, all string) (*fsm.MoveOutcome, error) {
		cmd := build(ids, all)
		cmd.StampUnixNano, cmd.Actor = o.opts.Clock.Now().UnixNano(), o.opts.Actor
		res, err := o.opts.Proposer.Propose(ctx, cmd)
		switch {
		case err != nil:
			return nil, fmt.Errorf("s&f %s: %w: %w", what, ErrUnavailable, err)
		case res == nil:
			return nil, fmt.Errorf("s&f %s: %w: no result", what, ErrUnavailable)
		case res.Err != nil:
			return nil, fmt.Errorf("s&f %s: %w", what, res.Err)
		}
		out := outcome(res)
		if out == nil {
			return nil, fmt.Errorf("s&f %s: result does not answer the command", what)
		}
		total.Moved += out.Moved
		total.NotParked = append(total.NotParked, out.NotParked...)
		return out, nil
	}
	for start := 0; start < len(sel.IDs); start += fsm.MaxBulk {
		if _, err := step(sel.IDs[start:min(start+fsm.MaxBulk, len(sel.IDs))], ""); err != nil {
			return total, err
		}
	}
	if sel.AllOfTarget != "" {
		// One command moves at most fsm.MaxBulk; repeat while some remain.
		// Stop when a round moves nothing, so a concurrent park cannot
		// keep this loop going forever.
		for {
			out, err := step(nil, sel.AllOfTarget)
			if err != nil {
				return total, err
			}
			if out.Remaining == 0 || out.Moved == 0 {
				break
			}
		}
	}
	return total, nil
}
