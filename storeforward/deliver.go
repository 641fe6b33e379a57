package storeforward

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/backoff"
	"github.com/scadad/scadad/internal/clock"
	"github.com/scadad/scadad/role"
)

// DelivererOptions configure NewDeliverer. Zero fields take defaults.
type DelivererOptions struct {
	Reader   Reader     // required
	Proposer Proposer   // required
	Roles    RoleSource // required
	// Client sends deliveries. Default: a keep-alive client that does not
	// follow redirects (a 3xx is a failed delivery). Per-attempt timeouts
	// come from each target, not from the client.
	Client *http.Client
	// Actor is stamped on park and delivered commands (the node id).
	Actor string
	// ReadBatch is how many pending messages a worker reads at once
	// (default 256); RemoveBatch caps the ids of one SFDelivered (default
	// 2048, at most fsm.MaxBulk).
	ReadBatch   int
	RemoveBatch int
	// RemoveDelay is how long delivered ids gather before an SFDelivered
	// commits them (none by default: each commit takes what gathered during
	// the previous one). Every removal is a raft entry fsynced on every
	// node, work that competes with delivery itself; a longer wait means
	// fewer, larger removals, and a message delivered again by the next
	// Active node if the node dies within the wait (with the same
	// Idempotency-Key, as any delivery around a failover).
	RemoveDelay time.Duration
	// AttemptsInterval is how long failed attempts gather before an
	// SFAttempts records them in the buffer (default 1 s): a target that
	// fails fast costs at most one raft entry per interval, whatever its
	// backoff. A failover within it loses the latest attempts' count.
	AttemptsInterval time.Duration
	Clock            clock.Clock
	// Jitter returns a uniform draw in [0,1) for backoff jitter.
	Jitter  func() float64
	Logger  zerolog.Logger
	Metrics *Metrics
	// Kinds are the target kinds beyond HTTP, by Target.Kind.
	Kinds map[string]Kind
}

// Deliverer drains the buffer to the targets while the node is Active: one
// worker per target, started when the role becomes Active and stopped
// (in-flight requests cancelled) when it stops being Active or its epoch
// changes. It also holds the configured targets on every node.
type Deliverer struct {
	opts  DelivererOptions
	kinds map[string]Kind // read-only after NewDeliverer

	mu      sync.Mutex
	targets map[string]Target
	live    map[string]*liveStats
	status  DeliveryStatus

	reconf chan struct{} // SetTargets → Run
}

// DeliveryStatus is what the delivery side is doing.
type DeliveryStatus struct {
	// Active is true while workers run under Epoch.
	Active bool
	Epoch  role.Epoch
	// Workers are the targets with a running worker, sorted.
	Workers []string
}

// NewDeliverer returns a Deliverer with no targets; call SetTargets and Run.
func NewDeliverer(opts DelivererOptions) (*Deliverer, error) {
	if opts.Reader == nil || opts.Proposer == nil || opts.Roles == nil {
		return nil, errors.New("new deliverer: Reader, Proposer and Roles are required")
	}
	if opts.Client == nil {
		opts.Client = newHTTPClient()
	}
	if opts.ReadBatch <= 0 {
		opts.ReadBatch = 256
	}
	if opts.RemoveBatch <= 0 || opts.RemoveBatch > fsm.MaxBulk {
		opts.RemoveBatch = min(2048, fsm.MaxBulk)
	}
	if opts.AttemptsInterval <= 0 {
		opts.AttemptsInterval = time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.System()
	}
	if opts.Jitter == nil {
		opts.Jitter = defaultJitter
	}
	kinds := map[string]Kind{KindHTTP: httpKind{client: opts.Client, now: opts.Clock.Now}}
	for name, k := range opts.Kinds {
		if name == KindHTTP || k == nil {
			return nil, fmt.Errorf("new deliverer: kind %q cannot be added", name)
		}
		kinds[name] = k
	}
	return &Deliverer{
		opts:    opts,
		kinds:   kinds,
		targets: make(map[string]Target),
		live:    make(map[string]*liveStats),
		reconf:  make(chan struct{}, 1),
	}, nil
}

// SetTargets replaces the configured targets. Running workers of removed or
// changed targets are stopped and (changed or added) started again by Run;
// unchanged targets keep their worker. An invalid target changes nothing.
// Messages of a removed target stay in the buffer.
func (d *Deliverer) SetTargets(targets []Target) error {
	next := make(map[string]Target, len(targets))
	names := make([]string, 0, len(targets))
	for _, t := range targets {
		t = t.withDefaults()
		if err := t.validate(); err != nil {
			return fmt.Errorf("set targets: %w", err)
		}
		kind, ok := d.kinds[kindOf(t)]
		if !ok {
			return fmt.Errorf("set targets: target %s: unknown kind %q (known: %s)", t.Name, t.Kind, strings.Join(d.KindNames(), ", "))
		}
		if err := kind.Validate(t); err != nil {
			return fmt.Errorf("set targets: %w", err)
		}
		if _, dup := next[t.Name]; dup {
			return fmt.Errorf("set targets: target %s listed twice", t.Name)
		}
		next[t.Name] = t
		names = append(names, t.Name)
	}
	d.opts.Metrics.knowTargets(names)
	d.mu.Lock()
	d.targets = next
	d.mu.Unlock()
	select {
	case d.reconf <- struct{}{}:
	default:
	}
	return nil
}

// KindNames are the kinds this Deliverer delivers, sorted.
func (d *Deliverer) KindNames() []string {
	names := make([]string, 0, len(d.kinds))
	for n := range d.kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Target implements TargetLookup.
func (d *Deliverer) Target(name string) (Target, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.targets[name]
	return t, ok
}

// TargetNames implements TargetLookup.
func (d *Deliverer) TargetNames() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	names := make([]string, 0, len(d.targets))
	for n := range d.targets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Status reports what Run is doing now.
func (d *Deliverer) Status() DeliveryStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.status
	s.Workers = append([]string(nil), s.Workers...)
	return s
}

// Run follows the role stream until ctx ends, running one worker per
// target while the node is Active. It returns after every worker stopped.
func (d *Deliverer) Run(ctx context.Context) error {
	roles, stopWatch := d.opts.Roles.Watch()
	defer stopWatch()
	workers := make(map[string]*worker)
	defer func() {
		stopWorkers(workers, func(string) bool { return true })
		d.setStatus(role.State{}, workers)
	}()
	var st role.State
	for {
		select {
		case st = <-roles:
		case <-d.reconf:
		case <-ctx.Done():
			return nil
		}
		d.reconcile(ctx, st, workers)
	}
}

func (d *Deliverer) reconcile(ctx context.Context, st role.State, workers map[string]*worker) {
	desired := make(map[string]Target)
	if st.Role == role.Active {
		d.mu.Lock()
		for n, t := range d.targets {
			desired[n] = t
		}
		d.mu.Unlock()
	}
	stopWorkers(workers, func(name string) bool {
		w := workers[name]
		t, ok := desired[name]
		return !ok || !sameTarget(t, w.cfg) || w.epoch != st.Epoch
	})
	for name, t := range desired {
		if _, ok := workers[name]; ok {
			continue
		}
		w := d.newWorker(ctx, t, st.Epoch)
		workers[name] = w
		go w.run()
	}
	if len(workers) > 0 || st.Role == role.Active {
		d.opts.Logger.Debug().Str("role", st.Role.String()).Stringer("epoch", st.Epoch).Int("workers", len(workers)).Msg("s&f delivery reconciled")
	}
	d.setStatus(st, workers)
}

func (d *Deliverer) setStatus(st role.State, workers map[string]*worker) {
	names := make([]string, 0, len(workers))
	for n := range workers {
		names = append(names, n)
	}
	sort.Strings(names)
	d.mu.Lock()
	d.status = DeliveryStatus{Active: st.Role == role.Active, Epoch: st.Epoch, Workers: names}
	d.mu.Unlock()
}

// stopWorkers cancels every selected worker at once, then waits for all.
func stopWorkers(workers map[string]*worker, selected func(string) bool) {
	var stopping []*worker
	for name, w := range workers {
		if selected(name) {
			w.cancel()
			stopping = append(stopping, w)
			delete(workers, name)
		}
	}
	for _, w := range stopping {
		<-w.done
	}
}

func (d *Deliverer) liveStatsOf(target string) *liveStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	ls, ok := d.live[target]
	if !ok {
		ls = &liveStats{}
		d.live[target] = ls
	}
	return ls
}

// LiveStats are a target's in-memory delivery figures on this node.
type LiveStats struct {
	Delivered       uint64
	DeliveredPerSec float64
	LastError       string
	LastErrorAt     time.Time
	// HeadAttempts is the failed attempts of the message at the head of the
	// queue (in memory, reset by failover).
	HeadAttempts int
}

// Live returns the in-memory delivery figures of every target this node
// has delivered to.
func (d *Deliverer) Live() map[string]LiveStats {
	d.mu.Lock()
	names := make(map[string]*liveStats, len(d.live))
	for n, ls := range d.live {
		names[n] = ls
	}
	d.mu.Unlock()
	now := d.opts.Clock.Now()
	out := make(map[string]LiveStats, len(names))
	for n, ls := range names {
		out[n] = ls.snapshot(now)
	}
	return out
}

// rateWindow is the span delivered/s is averaged over.
const rateWindow = 10

type liveStats struct {
	mu           sync.Mutex
	delivered    uint64
	secs         [rateWindow]int64 // unix second of each bucket
	counts       [rateWindow]uint64
	lastErr      string
	lastErrAt    time.Time
	failingSince time.Time // first failure since the last delivery
	headAttempts int
}

// delivery counts a delivered message. It returns the error the target
// had been failing with, if it had, which a delivery clears: the target
// works again, and a last error shown after that would read as a current
// fault.
func (ls *liveStats) delivery(now time.Time, n int) (recovered string, since time.Time) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	recovered, since = ls.lastErr, ls.failingSince
	ls.lastErr, ls.failingSince = "", time.Time{}
	ls.delivered += uint64(n)
	ls.headAttempts = 0
	sec := now.Unix()
	i := sec % rateWindow
	if ls.secs[i] != sec {
		ls.secs[i], ls.counts[i] = sec, 0
	}
	ls.counts[i] += uint64(n)
	return recovered, since
}

func (ls *liveStats) failure(now time.Time, err error, attempts int) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.lastErr == "" {
		ls.failingSince = now
	}
	ls.lastErr, ls.lastErrAt, ls.headAttempts = err.Error(), now, attempts
}

func (ls *liveStats) snapshot(now time.Time) LiveStats {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var sum uint64
	sec := now.Unix()
	for i := range ls.secs {
		// The current second is partial: average over the full ones.
		if age := sec - ls.secs[i]; age >= 1 && age <= rateWindow {
			sum += ls.counts[i]
		}
	}
	return LiveStats{
		Delivered: ls.delivered, DeliveredPerSec: float64(sum) / rateWindow,
		LastError: ls.lastErr, LastErrorAt: ls.lastErrAt, HeadAttempts: ls.headAttempts,
	}
}

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
// Retry-After, until max_attempts. A batch of several messages that is
// refused for good, or reaches max_attempts, is delivered again one
// message at a time, so only a message that fails on its own parks.
func (w *worker) deliver(batch []*Message) bool {
	failures := 0
	for _, m := range batch {
		failures = max(failures, int(m.Attempts))
	}
	for {
		// The gate can close for a moment without a role change (the
		// leader's quorum confirmation is late); a real change of role or
		// epoch cancels this worker, which ends the wait.
		for !w.gate() {
			if !w.sleep(gateRecheck) {
				return false
			}
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
		failures++
		w.d.opts.Metrics.observeDelivery(w.cfg.Name, 0, now.Sub(start))
		w.live.failure(now, err, failures)
		permanent, retryAfter := classify(err, w.cfg.ParkOn)
		w.log.Warn().Err(err).Str("id", batch[0].ID).Int("messages", len(batch)).Int("attempt", failures).Int("max_attempts", w.cfg.MaxAttempts).Bool("permanent", permanent).Msg("delivery failed")
		if len(batch) > 1 && (permanent || failures >= w.cfg.MaxAttempts) {
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
		case failures >= w.cfg.MaxAttempts:
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
		if !w.gate() {
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

// remover commits delivered ids in batches: while one SFDelivered is in
// flight the next batch accumulates.
type remover struct {
	d    *Deliverer
	log  zerolog.Logger
	mu   sync.Mutex
	ids  []string
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// finalFlushTimeout bounds the last SFDelivered of a stopping worker. If it
// fails the ids are delivered again by the next Active node (at-least-once).
const finalFlushTimeout = 3 * time.Second

func newRemover(d *Deliverer, log zerolog.Logger) *remover {
	return &remover{d: d, log: log, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

func (r *remover) add(id string) {
	r.mu.Lock()
	r.ids = append(r.ids, id)
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *remover) close() {
	close(r.stop)
	<-r.done
}

func (r *remover) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(len(r.ids), r.d.opts.RemoveBatch)
	if n == 0 {
		return nil
	}
	out := append([]string(nil), r.ids[:n]...)
	r.ids = r.ids[n:]
	return out
}

func (r *remover) putBack(ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(ids, r.ids...)
}

func (r *remover) run() {
	defer close(r.done)
	failures := 0
	for {
		final := false
		select {
		case <-r.kick:
			if r.d.opts.RemoveDelay > 0 {
				select {
				case <-r.d.opts.Clock.After(r.d.opts.RemoveDelay):
				case <-r.stop:
					final = true
				}
			}
		case <-r.stop:
			final = true
		}
		for ids := r.take(); len(ids) > 0; ids = r.take() {
			timeout := 10 * time.Second
			if final {
				timeout = finalFlushTimeout
			}
			err := r.commit(ids, timeout)
			if err == nil {
				failures = 0
				if !final && r.d.opts.RemoveDelay > 0 && len(ids) < r.d.opts.RemoveBatch {
					// What gathered during the commit waits for the
					// next delay (its adds left a kick); only a full
					// batch, a backlog, goes on at once.
					break
				}
				continue
			}
			var cerr *fsm.CommandError
			if final || errors.As(err, &cerr) {
				r.log.Warn().Err(err).Int("ids", len(ids)).Msg("delivered ids not removed; they will be delivered again")
				continue
			}
			failures++
			r.log.Error().Err(err).Int("ids", len(ids)).Msg("remove delivered messages")
			r.putBack(ids)
			select {
			case <-r.d.opts.Clock.After(backoff.Delay(100*time.Millisecond, 5*time.Second, failures, r.d.opts.Jitter())):
			case <-r.stop:
				final = true
			}
		}
		if final {
			return
		}
	}
}

func (r *remover) commit(ids []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r.d.opts.Metrics.observeRemoveBatch(len(ids))
	res, err := r.d.opts.Proposer.Propose(ctx, &fsmpb.Command{
		StampUnixNano: r.d.opts.Clock.Now().UnixNano(),
		Actor:         r.d.opts.Actor,
		Body:          &fsmpb.Command_SfDelivered{SfDelivered: &fsmpb.SFDelivered{Ids: ids}},
	})
	if err != nil {
		return fmt.Errorf("commit %d delivered ids: %w", len(ids), err)
	}
	if res != nil && res.Err != nil {
		return fmt.Errorf("commit %d delivered ids: %w", len(ids), res.Err)
	}
	return nil
}
