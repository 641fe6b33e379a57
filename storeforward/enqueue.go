package storeforward

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/netguard"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/clock"
)

// EnqueueResult says what became of an enqueued message.
type EnqueueResult struct {
	ID string `json:"id"`
	// Duplicate is true when the id was already stored (pending, parked, or
	// recently delivered or discarded): nothing new was stored.
	Duplicate bool `json:"duplicate"`
}

// EnqueuerOptions configure NewEnqueuer. Zero fields take defaults.
type EnqueuerOptions struct {
	Proposer Proposer     // required
	Targets  TargetLookup // required
	// Counts says how many messages each target holds, for targets with
	// a MaxPending; without it no cap is enforced. Reader satisfies it.
	Counts PendingCounts
	// Actor is stamped on every command (the node id).
	Actor string
	// MaxBatchMessages and MaxBatchBytes close a batch early. MaxDelay is
	// the longest the first message of a batch waits for company while
	// other batches are being committed; with none in flight a batch goes
	// at once (the commit is then the wait that gathers the next batch).
	MaxBatchMessages int           // default 1024, at most fsm.MaxEnqueueBatch
	MaxBatchBytes    int           // default 4 MiB (payloads)
	MaxDelay         time.Duration // default 1 ms
	// MaxInFlight is how many batches may be proposed at once (pipelining);
	// while all are in flight the next batch keeps filling. Default 4.
	MaxInFlight int
	// ProposeTimeout bounds one batch's Propose. Default 10 s.
	ProposeTimeout time.Duration
	// NewID generates an id when the caller gives none. Default
	// TimeOrderedID at Clock's time.
	NewID   func() string
	Clock   clock.Clock
	Logger  zerolog.Logger
	Metrics *Metrics
	// Bodies bounds the request-body bytes Handler holds at once over all
	// requests; nil bounds only each body (by its target's limit).
	Bodies *netguard.BodyBudget
}

// Enqueuer stores messages in the replicated buffer, group-committing
// concurrent calls into one SFEnqueue command per batch.
type Enqueuer struct {
	opts EnqueuerOptions

	reqs chan *enqueueReq
	sem  chan struct{} // one token per in-flight Propose
	// freed wakes the loop when a commit ends: an idle pipeline sends the
	// waiting batch without its delay.
	freed chan struct{}
	// filling is how many requests the batch being filled holds (written
	// by the loop): a caller proposes alone only when it is 0.
	filling atomic.Int32

	ctx    context.Context // cancelled by Close: aborts in-flight Proposes
	cancel context.CancelFunc
	loopWG sync.WaitGroup // the batching loop
	inWG   sync.WaitGroup // in-flight commits
	// closing orders a lone caller's inWG.Add before Close's Wait.
	closing sync.RWMutex
}

type enqueueReply struct {
	res EnqueueResult
	err error
}

type enqueueReq struct {
	msg   *fsmpb.Message
	start time.Time
	done  chan enqueueReply // buffered 1
	// sameID are later requests of this batch with the same id: they get
	// this message's outcome as a duplicate.
	sameID []*enqueueReq
}

// NewEnqueuer starts the batching loop; Close stops it.
func NewEnqueuer(opts EnqueuerOptions) (*Enqueuer, error) {
	if opts.Proposer == nil || opts.Targets == nil {
		return nil, errors.New("new enqueuer: Proposer and Targets are required")
	}
	if opts.MaxBatchMessages <= 0 || opts.MaxBatchMessages > fsm.MaxEnqueueBatch {
		opts.MaxBatchMessages = min(1024, fsm.MaxEnqueueBatch)
	}
	if opts.MaxBatchBytes <= 0 {
		opts.MaxBatchBytes = 4 << 20
	}
	if opts.MaxDelay <= 0 {
		opts.MaxDelay = time.Millisecond
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 4
	}
	if opts.ProposeTimeout <= 0 {
		opts.ProposeTimeout = 10 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.System()
	}
	if opts.Bodies == nil {
		opts.Bodies = netguard.NewBodyBudget(0)
	}
	if opts.NewID == nil {
		clock := opts.Clock
		opts.NewID = func() string { return TimeOrderedID(clock.Now()) }
	}
	e := &Enqueuer{
		opts:  opts,
		reqs:  make(chan *enqueueReq),
		sem:   make(chan struct{}, opts.MaxInFlight),
		freed: make(chan struct{}, 1),
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.loopWG.Add(1)
	go e.loop()
	return e, nil
}

// Close stops accepting enqueues, fails the batch still being filled with
// ErrClosed and aborts in-flight Proposes (their callers get an error; the
// commands may still commit).
func (e *Enqueuer) Close() {
	e.cancel()
	// Once closing is ours, every lone caller past its check has added
	// itself to inWG, and every later one sees the cancel.
	e.closing.Lock()
	//lint:ignore SA2001 the empty critical section is the point: see above
	e.closing.Unlock()
	e.loopWG.Wait()
	e.inWG.Wait()
}

// Validate checks a message the way Enqueue will, without storing it.
func (e *Enqueuer) Validate(target string, payload []byte, id string, headers []Header) error {
	t, err := e.target(target)
	if err != nil {
		return err
	}
	return validateFor(target, t, payload, id, headers)
}

// target is the configuration of the target called name.
func (e *Enqueuer) target(name string) (Target, error) {
	t, ok := e.opts.Targets.Target(name)
	if !ok {
		return Target{}, &UnknownTargetError{Target: name, Known: e.opts.Targets.TargetNames()}
	}
	return t, nil
}

// validateFor checks a message to target, configured as t.
func validateFor(target string, t Target, payload []byte, id string, headers []Header) error {
	limit := min(t.MaxPayloadBytes, fsm.MaxPayloadBytes)
	if limit <= 0 {
		limit = min(DefaultMaxPayloadBytes, fsm.MaxPayloadBytes)
	}
	if len(payload) > limit {
		return &PayloadTooLargeError{Target: target, Size: len(payload), Limit: limit}
	}
	if len(id) > fsm.MaxIDBytes {
		return invalidf("message id is %d bytes, limit %d", len(id), fsm.MaxIDBytes)
	}
	// Mirror the FSM's checks: one invalid message would refuse the whole
	// group-committed batch it shares with others.
	if len(headers) > maxMessageHeaders {
		return invalidf("%d headers, limit %d", len(headers), maxMessageHeaders)
	}
	for _, h := range headers {
		switch {
		case h.Key == "" || len(h.Key) > fsm.MaxIDBytes:
			return invalidf("header name %q: want 1..%d bytes", h.Key, fsm.MaxIDBytes)
		case len(h.Value) > fsm.MaxTextBytes:
			return invalidf("header %s value is %d bytes, limit %d", h.Key, len(h.Value), fsm.MaxTextBytes)
		case reservedHeader(h.Key):
			return invalidf("header %s is set by delivery", h.Key)
		}
	}
	// Whatever the target's kind: a deploy may make it an HTTP target,
	// and the id is its Idempotency-Key there.
	if reason := headerProblem(id, headers); reason != "" {
		return invalidf("message %q: %s", id, reason)
	}
	return nil
}

// PendingCounts reads how many messages each target holds, and whether an
// id is stored.
type PendingCounts interface {
	SFStats() (map[string]fsm.TargetStats, error)
	SFHas(id string) (bool, error)
}

// checkRoom refuses a message to a target that holds its MaxPending
// messages already, unless id is stored (a retry of an acknowledged
// enqueue, answered as a duplicate). It reads this node's replica and does
// not count messages still on their way into it, so concurrent enqueues may
// pass the cap by about one batch: a cap on the disk the buffer takes, not
// an exact quota.
func (e *Enqueuer) checkRoom(target string, t Target, id string) error {
	if t.MaxPending <= 0 || e.opts.Counts == nil {
		return nil
	}
	stats, err := e.opts.Counts.SFStats()
	if err != nil {
		return fmt.Errorf("%w: read how many messages %s holds: %w", ErrUnavailable, target, err)
	}
	if n := stats[target].Pending; n >= uint64(t.MaxPending) {
		if stored, err := e.opts.Counts.SFHas(id); err == nil && stored {
			return nil
		}
		e.opts.Metrics.observeTargetFull(target)
		return &TargetFullError{Target: target, Pending: n, Limit: t.MaxPending}
	}
	return nil
}

// maxMessageHeaders mirrors the FSM's per-message header limit.
const maxMessageHeaders = 64

// Enqueue stores payload for target under id (a random id when empty) and
// returns once the command holding it is committed on a quorum. A
// cancelled ctx returns early; the message may still be stored, and
// enqueueing again with the same id is safe.
func (e *Enqueuer) Enqueue(ctx context.Context, target string, payload []byte, id string, headers []Header) (EnqueueResult, error) {
	p, msg, err := e.prepare(target, payload, id, headers)
	if err != nil {
		return EnqueueResult{ID: p.ID()}, err
	}
	if e.takeIdleSlot() {
		return e.commitAlone(ctx, p, msg)
	}
	if err := e.handOver(ctx, p, msg); err != nil {
		return EnqueueResult{ID: p.ID()}, err
	}
	return p.Wait(ctx)
}

// takeIdleSlot takes an in-flight slot when nothing is in flight and no
// batch is filling: a caller then proposes its message itself, with no
// hand-over to the batching loop and back. While anything is in flight it
// returns false and the message joins a batch, as before.
func (e *Enqueuer) takeIdleSlot() bool {
	if len(e.sem) != 0 || e.filling.Load() != 0 {
		return false
	}
	select {
	case e.sem <- struct{}{}:
		return true
	default:
		return false
	}
}

// commitAlone proposes msg as a batch of its own, holding the slot
// takeIdleSlot took. The propose carries the caller's values but not its
// cancellation, and ends with its own timeout or Close: raft keeps an
// entry whoever waits for it, so the slot is held until raft has answered
// even when the caller stops waiting first, and callers that give up
// cannot put more proposals in flight than the slots allow. The caller
// still returns as soon as its ctx ends.
func (e *Enqueuer) commitAlone(ctx context.Context, p *Pending, msg *fsmpb.Message) (EnqueueResult, error) {
	e.closing.RLock()
	if e.ctx.Err() != nil {
		e.closing.RUnlock()
		e.release()
		return EnqueueResult{ID: p.id}, fmt.Errorf("enqueue %s to %s: %w", p.id, p.target, ErrClosed)
	}
	e.inWG.Add(1) // before Close waits: Close takes closing first
	e.closing.RUnlock()
	start := e.opts.Clock.Now()
	e.opts.Metrics.observeEnqueueBatch(1)
	type outcome struct {
		items []fsm.EnqueueItem
		err   error
	}
	done := make(chan outcome, 1)
	go func() {
		defer e.inWG.Done()
		defer e.release()
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		defer context.AfterFunc(e.ctx, cancel)()
		items, err := e.propose(pctx, []*fsmpb.Message{msg})
		done <- outcome{items, err}
	}()
	var out outcome
	select {
	case out = <-done:
	case <-ctx.Done():
		return EnqueueResult{ID: p.id}, fmt.Errorf("enqueue %s to %s (outcome unknown, retry with the same id): %w", p.id, p.target, ctx.Err())
	}
	if out.err != nil {
		return EnqueueResult{ID: p.id}, fmt.Errorf("enqueue %s to %s: %w", p.id, p.target, out.err)
	}
	res := EnqueueResult{ID: msg.Id, Duplicate: out.items[0].Duplicate}
	e.opts.Metrics.observeEnqueued(p.target, res.Duplicate, e.opts.Clock.Now().Sub(start))
	return res, nil
}

// Pending is a message handed to the group committer; Wait gives its
// outcome.
type Pending struct {
	e      *Enqueuer
	req    *enqueueReq
	id     string
	target string
}

// ID is the message's id, generated when the caller gave none.
func (p *Pending) ID() string { return p.id }

// Submit validates a message and hands it to the group committer without
// waiting for its commit, so one caller may have many in flight. It
// returns an error for a message refused before it was handed over (the
// Pending still names its id). ctx bounds only the hand-over.
func (e *Enqueuer) Submit(ctx context.Context, target string, payload []byte, id string, headers []Header) (*Pending, error) {
	p, msg, err := e.prepare(target, payload, id, headers)
	if err != nil {
		return p, err
	}
	return p, e.handOver(ctx, p, msg)
}

// prepare names and checks a message and builds what the FSM stores.
func (e *Enqueuer) prepare(target string, payload []byte, id string, headers []Header) (*Pending, *fsmpb.Message, error) {
	if id == "" {
		id = e.opts.NewID()
	}
	p := &Pending{e: e, id: id, target: target}
	t, err := e.target(target)
	if err != nil {
		return p, nil, err
	}
	if err := validateFor(target, t, payload, id, headers); err != nil {
		return p, nil, err
	}
	if err := e.checkRoom(target, t, id); err != nil {
		return p, nil, err
	}
	msg := &fsmpb.Message{Id: id, Target: target, Payload: payload}
	for _, h := range headers {
		msg.Headers = append(msg.Headers, &fsmpb.KV{Key: h.Key, Value: h.Value})
	}
	return p, msg, nil
}

// handOver gives msg to the batching loop; ctx bounds the hand-over.
func (e *Enqueuer) handOver(ctx context.Context, p *Pending, msg *fsmpb.Message) error {
	p.req = &enqueueReq{msg: msg, start: e.opts.Clock.Now(), done: make(chan enqueueReply, 1)}
	select {
	case e.reqs <- p.req:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("enqueue %s to %s: %w", p.id, p.target, ctx.Err())
	case <-e.ctx.Done():
		return fmt.Errorf("enqueue %s to %s: %w", p.id, p.target, ErrClosed)
	}
}

// Wait returns the outcome of a submitted message once the command
// holding it is committed on a quorum, or when ctx ends (the message may
// still be stored; enqueueing again with the same id is safe). Call it
// once.
func (p *Pending) Wait(ctx context.Context) (EnqueueResult, error) {
	select {
	case r := <-p.req.done:
		if r.err != nil {
			return EnqueueResult{ID: p.id}, fmt.Errorf("enqueue %s to %s: %w", p.id, p.target, r.err)
		}
		p.e.opts.Metrics.observeEnqueued(p.target, r.res.Duplicate, p.e.opts.Clock.Now().Sub(p.req.start))
		return r.res, nil
	case <-ctx.Done():
		return EnqueueResult{ID: p.id}, fmt.Errorf("enqueue %s to %s (outcome unknown, retry with the same id): %w", p.id, p.target, ctx.Err())
	}
}

// batch is the set of requests one SFEnqueue command carries.
type batch struct {
	reqs  []*enqueueReq
	byID  map[string]*enqueueReq
	bytes int
}

func (b *batch) add(r *enqueueReq) {
	if b.byID == nil {
		b.byID = make(map[string]*enqueueReq)
	}
	if first, ok := b.byID[r.msg.Id]; ok {
		first.sameID = append(first.sameID, r)
		return
	}
	b.byID[r.msg.Id] = r
	b.reqs = append(b.reqs, r)
	b.bytes += len(r.msg.Payload)
}

// loop collects requests into batches. A batch is ready when it is full,
// when its first message has waited MaxDelay, or at once when no batch is
// being committed (a lone caller does not wait for company that is not
// coming); a ready batch is handed to a commit goroutine as soon as an
// in-flight slot is free. While every slot is busy the batch keeps filling
// until full, and a full batch stops intake: that is the back-pressure.
func (e *Enqueuer) loop() {
	defer e.loopWG.Done()
	var (
		cur   batch
		timer <-chan time.Time
		ready bool
	)
	for {
		full := len(cur.reqs) >= e.opts.MaxBatchMessages || cur.bytes >= e.opts.MaxBatchBytes
		intake := e.reqs
		if full {
			intake, ready = nil, true
		}
		if len(cur.reqs) > 0 && len(e.sem) == 0 {
			ready = true // nothing in flight: no reason to wait
		}
		var slot chan struct{}
		if ready && len(cur.reqs) > 0 {
			slot = e.sem
		}
		select {
		case r := <-intake:
			if len(cur.reqs) == 0 && len(e.sem) > 0 {
				// Busy: the batch waits for company, at most MaxDelay.
				// (Idle, it goes on the next turn of the loop.)
				timer = e.opts.Clock.After(e.opts.MaxDelay)
			}
			cur.add(r)
			e.filling.Store(int32(len(cur.reqs)))
		case <-timer:
			timer, ready = nil, true
		case <-e.freed:
		case slot <- struct{}{}:
			b := cur
			cur, timer, ready = batch{}, nil, false
			e.filling.Store(0)
			e.inWG.Add(1)
			go e.commit(b)
		case <-e.ctx.Done():
			for _, r := range cur.reqs {
				r.reply(enqueueReply{err: ErrClosed})
			}
			return
		}
	}
}

// reply answers r and every later request of its batch with the same id.
func (r *enqueueReq) reply(rep enqueueReply) {
	r.done <- rep
	for _, s := range r.sameID {
		dup := rep
		if dup.err == nil {
			dup.res.Duplicate = true
		}
		s.done <- dup
	}
}

func (e *Enqueuer) commit(b batch) {
	defer e.inWG.Done()
	defer e.release()
	e.opts.Metrics.observeEnqueueBatch(len(b.reqs))
	msgs := make([]*fsmpb.Message, len(b.reqs))
	for i, r := range b.reqs {
		msgs[i] = r.msg
	}
	items, err := e.propose(e.ctx, msgs)
	var cerr *fsm.CommandError
	if errors.As(err, &cerr) && len(msgs) > 1 {
		// A deterministic refusal of the batch (a message Validate let
		// through): commit one by one so only the bad message fails.
		e.opts.Logger.Warn().Err(err).Int("messages", len(msgs)).Msg("enqueue batch refused; committing its messages one by one")
		for _, r := range b.reqs {
			items, err := e.propose(e.ctx, []*fsmpb.Message{r.msg})
			r.reply(replyFor(r, items, err))
		}
		return
	}
	for i, r := range b.reqs {
		if err != nil {
			r.reply(enqueueReply{err: err})
			continue
		}
		r.reply(replyFor(r, items[i:i+1], nil))
	}
}

// release frees an in-flight slot and wakes the loop: an idle pipeline
// sends the waiting batch without its delay.
func (e *Enqueuer) release() {
	<-e.sem
	select {
	case e.freed <- struct{}{}:
	default:
	}
}

func replyFor(r *enqueueReq, items []fsm.EnqueueItem, err error) enqueueReply {
	if err != nil {
		return enqueueReply{err: err}
	}
	return enqueueReply{res: EnqueueResult{ID: r.msg.Id, Duplicate: items[0].Duplicate}}
}

// propose commits one SFEnqueue and returns its per-message verdicts.
func (e *Enqueuer) propose(parent context.Context, msgs []*fsmpb.Message) ([]fsm.EnqueueItem, error) {
	ctx, cancel := context.WithTimeout(parent, e.opts.ProposeTimeout)
	defer cancel()
	cmd := &fsmpb.Command{
		StampUnixNano: e.opts.Clock.Now().UnixNano(),
		Actor:         e.opts.Actor,
		Body:          &fsmpb.Command_SfEnqueue{SfEnqueue: &fsmpb.SFEnqueue{Messages: msgs}},
	}
	res, err := e.opts.Proposer.Propose(ctx, cmd)
	switch {
	case err != nil:
		return nil, fmt.Errorf("commit batch of %d: %w: %w", len(msgs), ErrUnavailable, err)
	case res == nil:
		return nil, fmt.Errorf("commit batch of %d: %w: no result", len(msgs), ErrUnavailable)
	case res.Err != nil:
		var cerr *fsm.CommandError
		if errors.As(res.Err, &cerr) {
			return nil, fmt.Errorf("commit batch of %d: %w: %w", len(msgs), ErrInvalid, res.Err)
		}
		// A storage failure on the leader: the node must restart.
		return nil, fmt.Errorf("commit batch of %d: %w: %w", len(msgs), ErrUnavailable, res.Err)
	case res.Enqueue == nil || len(res.Enqueue.Items) != len(msgs):
		return nil, fmt.Errorf("commit batch of %d: result does not answer the batch", len(msgs))
	}
	return res.Enqueue.Items, nil
}
