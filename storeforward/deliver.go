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
