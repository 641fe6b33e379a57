package storeforward

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
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
}

// Deliverer drains the buffer to the targets while the node is Active: one
// worker per target, started when the role becomes Active and stopped
// (in-flight requests cancelled) when it stops being Active or its epoch
// changes. It also holds the configured targets on every node.
type Deliverer struct {
	opts DelivererOptions

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
	return &Deliverer{
		opts:    opts,
		targets: make(map[string]Target),
		live:    make(map[string]*liveStats),
		reconf:  make(chan struct{}, 1),
	}, nil
}

func newHTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          256,
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
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
func (ls *liveStats) delivery(now time.Time) (recovered string, since time.Time) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	recovered, since = ls.lastErr, ls.failingSince
	ls.lastErr, ls.failingSince = "", time.Time{}
	ls.delivered++
	ls.headAttempts = 0
	sec := now.Unix()
	i := sec % rateWindow
	if ls.secs[i] != sec {
		ls.secs[i], ls.counts[i] = sec, 0
	}
	ls.counts[i]++
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

	// client sends this target's deliveries when it has a CAFile (built
	// on first use); otherwise the Deliverer's client does.
	clientMu sync.Mutex
	client   *http.Client
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

// gate reports whether this worker may still deliver: the node is Active in
// the epoch the worker was started under. Checked before every attempt, so
// once another role is published no new delivery starts.
func (w *worker) gate() bool {
	s := w.d.opts.Roles.Current()
	return s.Role == role.Active && s.Epoch == w.epoch && w.ctx.Err() == nil
}

func (w *worker) run() {
	defer close(w.done)
	defer w.dropClient()
	go w.rem.run()
	defer w.rem.close()
	go w.att.run()
	defer w.att.close()
	changes, stopChanges := w.d.opts.Reader.Changes()
	defer stopChanges()
	w.log.Info().Msg("s&f delivery started")
	defer w.log.Info().Msg("s&f delivery stopped")

	// Strict FIFO (MaxInFlight 1): this loop delivers each message
	// itself, the next one only once it is delivered or parked; a
	// hand-over per message would only add to a path bound by round
	// trips. Otherwise MaxInFlight senders take messages in enqueue order
	// from an unbuffered channel, so one is handed over only when a sender
	// is free.
	strict := w.cfg.MaxInFlight <= 1
	jobs := make(chan *Message)
	var senders sync.WaitGroup
	for i := 0; !strict && i < w.cfg.MaxInFlight; i++ {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for m := range jobs {
				if !w.deliver(m) {
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
		msgs, err := w.d.opts.Reader.SFPending(w.cfg.Name, cursor, w.d.opts.ReadBatch)
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
		for i := range msgs {
			if strict {
				if !w.deliver(&msgs[i]) {
					return // stopped
				}
			} else {
				select {
				case jobs <- &msgs[i]:
				case <-w.ctx.Done():
					return
				}
			}
			cursor = msgs[i].Seq
		}
	}
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

// deliver sends m until it is delivered or parked (true), or the worker
// must stop (false). Failed attempts count on from what the buffer
// recorded (an earlier Active node's attempts included). A refusal the
// target's classification calls permanent parks m at once; any other
// failure is retried after a backoff, or after the receiver's
// Retry-After, until max_attempts.
func (w *worker) deliver(m *Message) bool {
	failures := int(m.Attempts)
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
		err := w.post(m)
		now := w.d.opts.Clock.Now()
		if err == nil {
			w.d.opts.Metrics.observeDelivery(w.cfg.Name, true, now.Sub(start))
			w.att.forget(m.ID)
			// Handed to the remover before it counts as delivered: a
			// reader of Live that sees it delivered also finds it
			// waiting for removal.
			w.rem.add(m.ID)
			if lastErr, since := w.live.delivery(now); lastErr != "" {
				w.log.Info().Str("id", m.ID).Str("failing_for", now.Sub(since).Round(time.Millisecond).String()).Str("last_error", lastErr).Msg("delivery resumed")
			}
			return true
		}
		if w.ctx.Err() != nil {
			// Cancelled by a role change, not the target's fault.
			return false
		}
		failures++
		w.d.opts.Metrics.observeDelivery(w.cfg.Name, false, now.Sub(start))
		w.live.failure(now, err, failures)
		permanent, retryAfter := classify(err, w.cfg.ParkOn)
		w.log.Warn().Err(err).Str("id", m.ID).Int("attempt", failures).Int("max_attempts", w.cfg.MaxAttempts).Bool("permanent", permanent).Msg("delivery failed")
		switch {
		case permanent:
			w.att.forget(m.ID)
			return w.park(m, failures, err, ParkRefused)
		case failures >= w.cfg.MaxAttempts:
			w.att.forget(m.ID)
			return w.park(m, failures, err, ParkMaxAttempts)
		}
		w.att.record(m.ID, failures, errorText(err, maxReasonBytes))
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

// DeliveryError is a delivery the target answered with a non-2xx status.
type DeliveryError struct {
	Status int
	Body   string // the start of the answer
	// RetryAfter is the answer's Retry-After (429 and 503 only).
	RetryAfter time.Duration
}

// Verdict implements Refusal.
func (e *DeliveryError) Verdict() Verdict {
	return Verdict{Code: strconv.Itoa(e.Status), Permanent: httpPermanent(e.Status), RetryAfter: e.RetryAfter}
}

func (e *DeliveryError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("target answered %d", e.Status)
	}
	return fmt.Sprintf("target answered %d: %s", e.Status, e.Body)
}

// post makes one delivery attempt, bounded by the target's timeout.
func (w *worker) post(m *Message) error {
	ctx, cancel := context.WithTimeout(w.ctx, w.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.URL, bytes.NewReader(m.Payload))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	for k, v := range w.cfg.Headers {
		req.Header.Set(k, v)
	}
	for _, h := range m.Headers {
		req.Header.Set(h.Key, h.Value)
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	req.Header.Set(HeaderIdempotencyKey, m.ID)
	req.Header.Set(HeaderEpoch, w.epoch.String())
	client, err := w.httpClient()
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL may carry credentials; the target name says where
		}
		if errors.Is(err, context.DeadlineExceeded) && w.ctx.Err() == nil {
			return fmt.Errorf("post: no answer within %v", w.cfg.Timeout)
		}
		var verr *tls.CertificateVerificationError
		if errors.As(err, &verr) {
			// The target may have moved to a certificate of a CA
			// rotated into ca_file in place: read it again next time.
			w.dropClient()
		}
		return fmt.Errorf("post: %w", err)
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	// Drain a little more so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	derr := &DeliveryError{Status: resp.StatusCode, Body: string(bytes.TrimSpace(head))}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		derr.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), w.d.opts.Clock.Now())
	}
	return derr
}

// httpClient is the client for this target's deliveries: the Deliverer's,
// or for a target with a CAFile one that trusts those CAs only. A CA file
// that cannot be read fails the attempt, as an unreachable target would
// (counted, retried, shown in sf stats), and is read again next time; so
// is one after the target's certificate failed verification (dropClient).
func (w *worker) httpClient() (*http.Client, error) {
	if w.cfg.CAFile == "" {
		return w.d.opts.Client, nil
	}
	w.clientMu.Lock()
	defer w.clientMu.Unlock()
	if w.client != nil {
		return w.client, nil
	}
	pem, err := os.ReadFile(w.cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("read ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("ca_file %s holds no PEM certificate", w.cfg.CAFile)
	}
	c := newHTTPClient()
	c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	w.client = c
	return c, nil
}

// dropClient lets go of the target's own client, if it has one, and its
// connections: the next attempt (or the next worker) builds another from
// the CA file as it is then.
func (w *worker) dropClient() {
	w.clientMu.Lock()
	defer w.clientMu.Unlock()
	if w.client != nil {
		w.client.CloseIdleConnections()
		w.client = nil
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
