package storeforward

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/backoff"
	"github.com/scadad/scadad/role"
)

// worker delivers one target's queue in FIFO order under one epoch.
type worker struct {
	d      *Deliverer
	cfg    Target
	epoch  role.Epoch
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	live   *liveStats
	rem    *remover
	att    *attemptRecorder
	log    zerolog.Logger

	// sender is made on the first attempt (and again after NewSender
	// failed) and closed when the worker stops.
	senderMu sync.Mutex
	sender   Sender
}

func (d *Deliverer) newWorker(parent context.Context, t Target, epoch role.Epoch) *worker {
	ctx, cancel := context.WithCancel(parent)
	w := &worker{
		d: d, cfg: t, epoch: epoch, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		live: d.liveStatsOf(t.Name),
		log:  d.opts.Logger.With().Str("target", t.Name).Stringer("epoch", epoch).Logger(),
	}
	w.rem = newRemover(d, w.log)
	w.att = newAttemptRecorder(d, w.log)
	return w
}

// getSender returns the worker's sender, making it if need be.
func (w *worker) getSender() (Sender, error) {
	w.senderMu.Lock()
	defer w.senderMu.Unlock()
	if w.sender != nil {
		return w.sender, nil
	}
	s, err := w.d.kinds[kindOf(w.cfg)].NewSender(w.cfg, SenderEnv{Epoch: w.epoch, NodeID: w.d.opts.Actor, Logger: w.log})
	if err != nil {
		return nil, fmt.Errorf("prepare %s delivery: %w", kindOf(w.cfg), err)
	}
	w.sender = s
	return s, nil
}

func (w *worker) closeSender() {
	w.senderMu.Lock()
	defer w.senderMu.Unlock()
	if w.sender != nil {
		w.sender.Close()
		w.sender = nil
	}
}

// send makes one attempt at batch, bounded by the target's timeout.
func (w *worker) send(batch []*Message) error {
	s, err := w.getSender()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.cfg.Timeout)
	defer cancel()
	return s.Send(ctx, batch)
}

// gate reports whether this worker may still deliver: the node is Active in
// the epoch the worker was started under. Checked before every attempt, so
// once another role is published no new delivery starts.
func (w *worker) gate() bool {
	s := w.d.opts.Roles.Current()
	return s.Role == role.Active && s.Epoch == w.epoch && w.ctx.Err() == nil
}

// waitGate waits while the gate is closed; false means the worker was
// stopped. The gate can close for a moment without a role change (the
// leader's quorum confirmation is late), and then nothing stops or
// restarts this worker: it must wait, not give up on its message. A real
// change of role or epoch cancels the worker, which ends the wait.
func (w *worker) waitGate() bool {
	for !w.gate() {
		if !w.sleep(gateRecheck) {
			return false
		}
	}
	return true
}

func (w *worker) run() {
	defer close(w.done)
	defer w.closeSender()
	go w.rem.run()
	defer w.rem.close()
	go w.att.run()
	defer w.att.close()
	changes, stopChanges := w.d.opts.Reader.Changes()
	defer stopChanges()
	w.log.Info().Msg("s&f delivery started")
	defer w.log.Info().Msg("s&f delivery stopped")

	// Strict FIFO (MaxInFlight 1): this loop delivers each batch itself,
	// the next one only once it is delivered or parked; a hand-over per
	// batch would only add to a path bound by round trips. Otherwise
	// MaxInFlight senders take batches in enqueue order from an
	// unbuffered channel, so one is handed over only when a sender is
	// free.
	strict := w.cfg.MaxInFlight <= 1
	jobs := make(chan []*Message)
	var senders sync.WaitGroup
	for i := 0; !strict && i < w.cfg.MaxInFlight; i++ {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for b := range jobs {
				if !w.deliver(b) {
					// Only a stopped worker gives up on a message.
					w.cancel()
				}
			}
		}()
	}
	defer func() {
		close(jobs)
		senders.Wait() // before the remover's final flush
	}()
	var cursor uint64 // pending seq of the last message handed to a sender
	restores := w.d.opts.Reader.Restores()
	readFailures := 0
	for w.ctx.Err() == nil {
		if r := w.d.opts.Reader.Restores(); r != restores {
			// A restored state numbers what is enqueued from now on from
			// its own counter, below the cursor: read it all again. A
			// message handed over before the restore may go out twice,
			// with the same Idempotency-Key.
			w.log.Warn().Uint64("cursor", cursor).Msg("s&f state restored from a snapshot; delivery reads the target's queue from its head again")
			cursor, restores = 0, r
		}
		msgs, err := w.d.opts.Reader.SFPending(w.cfg.Name, cursor, max(w.d.opts.ReadBatch, w.cfg.BatchMaxMessages))
		if err != nil {
			readFailures++
			w.log.Error().Err(err).Msg("read pending messages")
			if !w.sleep(backoff.Delay(w.cfg.BackoffFloor, w.cfg.BackoffMax, readFailures, w.d.opts.Jitter())) {
				return
			}
			continue
		}
		readFailures = 0
		if len(msgs) == 0 {
			select {
			case <-changes:
			case <-w.ctx.Done():
				return
			}
			continue
		}
		for rest := msgs; len(rest) > 0; {
			batch := nextBatch(rest, w.cfg.BatchMaxMessages, w.cfg.BatchMaxBytes)
			rest = rest[len(batch):]
			if strict {
				if !w.deliver(batch) {
					return // stopped
				}
			} else {
				select {
				case jobs <- batch:
				case <-w.ctx.Done():
					return
				}
			}
			cursor = batch[len(batch)-1].Seq
		}
	}
}

// nextBatch takes the head of msgs: at least one message, then more while
// the batch stays within maxMessages and maxBytes of payload.
func nextBatch(msgs []Message, maxMessages, maxBytes int) []*Message {
	batch := []*Message{&msgs[0]}
	size := len(msgs[0].Payload)
	for i := 1; i < len(msgs) && len(batch) < maxMessages; i++ {
		if size+len(msgs[i].Payload) > maxBytes {
			break
		}
		size += len(msgs[i].Payload)
		batch = append(batch, &msgs[i])
	}
	return batch
}

// sleep waits d or until the worker is stopped; false means stopped.
// gateRecheck is how often a worker whose gate is closed looks again.
const gateRecheck = 10 * time.Millisecond

func (w *worker) sleep(d time.Duration) bool {
	select {
	case <-w.d.opts.Clock.After(d):
		return true
	case <-w.ctx.Done():
		return false
	}
}

// deliver sends batch until it is delivered or parked (true), or the
// worker must stop (false). Failed attempts count on from what the buffer
// recorded (an earlier Active node's attempts included). A refusal the
// target's classification calls permanent parks a message at once; any
// other failure is retried after a backoff, or after the receiver's
// Retry-After, until max_attempts; a hold (Verdict.Hold) is no failed
// attempt and is waited out however long it lasts. A batch of several messages that is
// refused for good, or reaches max_attempts, is delivered again one
// message at a time, so only a message that fails on its own parks.
func (w *worker) deliver(batch []*Message) bool {
	failures := 0
	for _, m := range batch {
		failures = max(failures, int(m.Attempts))
	}
	holding := false // logged once per hold
	for {
		if !w.waitGate() {
			return false
		}
		start := w.d.opts.Clock.Now()
		err := w.send(batch)
		now := w.d.opts.Clock.Now()
		if err == nil {
			w.d.opts.Metrics.observeDelivery(w.cfg.Name, len(batch), now.Sub(start))
			for _, m := range batch {
				w.att.forget(m.ID)
				// Handed to the remover before it counts as delivered:
				// a reader of Live that sees it delivered also finds it
				// waiting for removal.
				w.rem.add(m.ID)
			}
			if lastErr, since := w.live.delivery(now, len(batch)); lastErr != "" {
				w.log.Info().Str("id", batch[0].ID).Str("failing_for", now.Sub(since).Round(time.Millisecond).String()).Str("last_error", lastErr).Msg("delivery resumed")
			}
			return true
		}
		if w.ctx.Err() != nil {
			// Cancelled by a role change, not the target's fault.
			return false
		}
		if wait, held := heldFor(err); held {
			// Not an attempt that failed: nothing counted, nothing parks.
			if !holding {
				w.log.Info().Err(err).Str("id", batch[0].ID).Msg("delivery held")
			}
			holding = true
			w.live.failure(now, err, failures)
			if !w.sleep(wait) {
				return false
			}
			continue
		}
		holding = false
		failures++
		w.d.opts.Metrics.observeDelivery(w.cfg.Name, 0, now.Sub(start))
		w.live.failure(now, err, failures)
		permanent, retryAfter := classify(err, w.cfg.ParkOn)
		w.log.Warn().Err(err).Str("id", batch[0].ID).Int("messages", len(batch)).Int("attempt", failures).Int("max_attempts", w.cfg.MaxAttempts).Bool("permanent", permanent).Msg("delivery failed")
		exhausted := w.cfg.MaxAttempts > 0 && failures >= w.cfg.MaxAttempts
		if len(batch) > 1 && (permanent || exhausted) {
			for _, m := range batch {
				m.Attempts = uint32(failures)
				if !w.deliver([]*Message{m}) {
					return false
				}
			}
			return true
		}
		switch {
		case permanent:
			w.att.forget(batch[0].ID)
			return w.park(batch[0], failures, err, ParkRefused)
		case exhausted:
			w.att.forget(batch[0].ID)
			return w.park(batch[0], failures, err, ParkMaxAttempts)
		}
		text := errorText(err, maxReasonBytes)
		for _, m := range batch {
			w.att.record(m.ID, failures, text)
		}
		wait := backoff.Delay(w.cfg.BackoffFloor, w.cfg.BackoffMax, failures, w.d.opts.Jitter())
		if retryAfter > 0 {
			wait = retryAfter
		}
		if !w.sleep(wait) {
			return false
		}
	}
}

// maxReasonBytes bounds the error text kept with a message.
const maxReasonBytes = 1024

// park moves m to the parked list, retrying the command until it commits
// or the worker stops.
func (w *worker) park(m *Message, attempts int, cause error, why string) bool {
	reason := errorText(cause, maxReasonBytes)
	for try := 1; ; try++ {
		if !w.waitGate() {
			return false
		}
		ctx, cancel := context.WithTimeout(w.ctx, w.cfg.Timeout+5*time.Second)
		res, err := w.d.opts.Proposer.Propose(ctx, &fsmpb.Command{
			StampUnixNano: w.d.opts.Clock.Now().UnixNano(),
			Actor:         w.d.opts.Actor,
			Body:          &fsmpb.Command_SfPark{SfPark: &fsmpb.SFPark{Id: m.ID, Reason: reason, Attempts: uint32(attempts)}},
		})
		cancel()
		if err == nil && res != nil && res.Err != nil {
			err = res.Err
		}
		switch {
		case err == nil:
			w.d.opts.Metrics.observeParked(w.cfg.Name, why)
			w.log.Warn().Str("id", m.ID).Int("attempts", attempts).Str("why", why).Str("reason", reason).Msg("message parked")
			return true
		case errors.Is(err, fsm.ErrNotPending):
			// Gone meanwhile (delivered by an earlier leader's removal
			// landing late): nothing to park.
			return true
		}
		w.log.Error().Err(err).Str("id", m.ID).Msg("park message")
		if !w.sleep(backoff.Delay(w.cfg.BackoffFloor, w.cfg.BackoffMax, try, w.d.opts.Jitter())) {
			return false
		}
	}
}
