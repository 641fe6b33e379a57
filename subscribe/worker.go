package subscribe

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/gateway"
	"github.com/scadad/scadad/internal/clock"
)

// Subscription is one thing a Worker keeps subscribed: an instance's tags on
// a connection, or an alarm source.
type Subscription interface {
	// Subscribe makes one attempt and reports whether it failed. ctx is
	// cancelled when the attempt is superseded or the worker stops.
	Subscribe(ctx context.Context) error
}

// WorkerOptions configure a Worker. Zero values take defaults.
type WorkerOptions struct {
	// Connection and Instance label logs and metrics.
	Connection string
	Instance   string
	Policy     RetryPolicy
	Clock      clock.Clock
	// Rand returns a uniform sample in [0,1) for jitter.
	Rand    func() float64
	Logger  zerolog.Logger
	Metrics *Metrics
}

// WorkerStatus is a snapshot of a worker for status pages and tests.
type WorkerStatus struct {
	Connection string
	Endpoint   string // the connection's gateway (filled in by Manager.Status)
	Instance   string
	Confirmed  bool
	InFlight   bool
	Interval   time.Duration
	Attempts   uint64
	LastEvent  Event
	// Steps counts the guard decisions taken so far.
	Steps uint64
}

// Worker drives one Guard: it sends attempts, arms the watchdog, feeds
// replies and connection signals in, all from one goroutine so a reply and a
// tick can never interleave.
type Worker struct {
	opts WorkerOptions
	sub  Subscription
	log  zerolog.Logger

	signal chan struct{}
	mu     sync.Mutex
	good   bool
	inval  bool
	lost   bool
	status WorkerStatus
}

type attemptResult struct {
	id  uint64
	err error
}

// NewWorker returns a worker for sub; call Run to start it.
func NewWorker(sub Subscription, opts WorkerOptions) *Worker {
	opts.Policy = opts.Policy.withDefaults()
	if opts.Clock == nil {
		opts.Clock = clock.System()
	}
	if opts.Rand == nil {
		opts.Rand = rand.Float64
	}
	return &Worker{
		opts:   opts,
		sub:    sub,
		log:    opts.Logger.With().Str("connection", opts.Connection).Str("instance", opts.Instance).Logger(),
		signal: make(chan struct{}, 1),
		status: WorkerStatus{Connection: opts.Connection, Instance: opts.Instance},
	}
}

// ConnectionGood tells the worker its connection came back Good: the backoff
// resets to the floor.
func (w *Worker) ConnectionGood() {
	w.mu.Lock()
	w.good = true
	w.mu.Unlock()
	w.poke()
}

// ConnectionLost tells the worker its connection went bad: its
// subscription stops counting as confirmed until the connection is back.
func (w *Worker) ConnectionLost() {
	w.mu.Lock()
	w.lost, w.good = true, false
	w.mu.Unlock()
	w.poke()
}

// Invalidate tells the worker its subscription is gone (new gateway
// session): it resubscribes at once.
func (w *Worker) Invalidate() {
	w.mu.Lock()
	w.inval = true
	w.mu.Unlock()
	w.poke()
}

func (w *Worker) poke() {
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// Status returns a snapshot.
func (w *Worker) Status() WorkerStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status
}

// Run keeps the subscription until ctx ends.
func (w *Worker) Run(ctx context.Context) {
	g := NewGuard(w.opts.Policy, w.opts.Rand)
	replies := make(chan attemptResult)
	attempts := map[uint64]context.CancelFunc{}
	var wg sync.WaitGroup
	defer func() {
		for _, cancel := range attempts {
			cancel()
		}
		wg.Wait()
		w.observeStop()
	}()
	start := func(id uint64) {
		actx, cancel := context.WithCancel(ctx)
		attempts[id] = cancel
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := w.sub.Subscribe(actx)
			select {
			case replies <- attemptResult{id: id, err: err}:
			case <-ctx.Done():
			}
		}()
	}
	act := func(d Decision, err error) {
		if d.Cancel != 0 {
			if cancel, ok := attempts[d.Cancel]; ok {
				cancel()
				delete(attempts, d.Cancel)
			}
		}
		if d.Send != 0 {
			start(d.Send)
		}
		w.observe(g, d, err)
	}

	act(g.Start(w.opts.Clock.Now()), nil)
	for {
		var timer clock.Timer
		var tick <-chan time.Time
		if due := g.Due(); !due.IsZero() {
			timer = w.opts.Clock.NewTimer(due.Sub(w.opts.Clock.Now()))
			tick = timer.C()
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case now := <-tick:
			act(g.Tick(now), nil)
		case r := <-replies:
			if cancel, ok := attempts[r.id]; ok {
				cancel()
				delete(attempts, r.id)
			}
			act(g.Reply(w.opts.Clock.Now(), r.id, r.err != nil), r.err)
		case <-w.signal:
			w.mu.Lock()
			lost, good, inval := w.lost, w.good, w.inval
			w.lost, w.good, w.inval = false, false, false
			w.mu.Unlock()
			if lost {
				act(g.ConnectionLost(w.opts.Clock.Now()), nil)
			}
			if inval {
				act(g.Invalidate(w.opts.Clock.Now()), nil)
			}
			if good {
				act(g.ConnectionGood(w.opts.Clock.Now()), nil)
			}
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// observe logs the cadence and updates metrics and status after a step.
func (w *Worker) observe(g *Guard, d Decision, err error) {
	iv := g.Interval()
	switch d.Event {
	case EventSubscribe:
		w.log.Info().Uint64("attempt", d.Send).Dur("next_retry_in", iv).Msg("subscribing")
	case EventStillInFlight:
		w.log.Info().Dur("in_flight_for", d.Age).Dur("ceiling", w.opts.Policy.InFlightCeiling).Msg("subscribe still in flight; not re-sending")
	case EventPresumedLost:
		w.log.Warn().Dur("unanswered_for", d.Age).Uint64("attempt", d.Send).Dur("next_retry_in", iv).Msg("subscribe presumed lost; re-sending")
	case EventFailed:
		if errors.Is(err, gateway.ErrNotConnected) {
			// A worker that starts with its node becoming Active usually
			// beats the gateway session; it subscribes again the moment
			// the connection turns good, not after the backoff.
			w.log.Info().Err(err).Msg("subscribe waits for the gateway session")
		} else {
			w.log.Warn().Err(err).Dur("after", d.Age).Dur("next_retry_in", iv).Msg("subscribe failed")
		}
	case EventConfirmed:
		w.log.Info().Dur("after", d.Age).Msg("subscription confirmed")
	case EventSuperseded:
		w.log.Debug().Err(err).Msg("reply to a superseded subscribe ignored")
	case EventReset:
		w.log.Info().Dur("next_retry_in", iv).Bool("confirmed", g.Confirmed()).Msg("connection good; subscribe backoff reset")
	case EventLost:
		w.log.Debug().Msg("connection lost; subscription no longer confirmed")
	case EventInvalidated:
		w.log.Info().Uint64("attempt", d.Send).Msg("subscription lost with the gateway session; resubscribing")
	}
	if m := w.opts.Metrics; m != nil {
		conn := w.opts.Connection
		if d.Send != 0 {
			m.attempts.WithLabelValues(conn).Inc()
		}
		switch d.Event {
		case EventPresumedLost:
			m.retries.WithLabelValues(conn, "presumed_lost").Inc()
		case EventInvalidated:
			m.retries.WithLabelValues(conn, "invalidated").Inc()
		case EventSubscribe:
			if g.lastID > 1 {
				m.retries.WithLabelValues(conn, "failure").Inc()
			}
		}
		m.backoff.WithLabelValues(conn, w.opts.Instance).Set(iv.Seconds())
		c := 0.0
		if g.Confirmed() {
			c = 1
		}
		m.confirmed.WithLabelValues(conn, w.opts.Instance).Set(c)
	}
	w.mu.Lock()
	wasInFlight := w.status.InFlight
	w.status.Confirmed = g.Confirmed()
	w.status.InFlight = g.InFlight() != 0
	w.status.Interval = iv
	w.status.Attempts = g.lastID
	w.status.LastEvent = d.Event
	w.status.Steps++
	nowInFlight := w.status.InFlight
	w.mu.Unlock()
	if m := w.opts.Metrics; m != nil && wasInFlight != nowInFlight {
		if nowInFlight {
			m.inFlight.WithLabelValues(w.opts.Connection).Inc()
		} else {
			m.inFlight.WithLabelValues(w.opts.Connection).Dec()
		}
	}
}

func (w *Worker) observeStop() {
	w.mu.Lock()
	wasInFlight := w.status.InFlight
	w.status.InFlight = false
	w.mu.Unlock()
	if m := w.opts.Metrics; m != nil {
		if wasInFlight {
			m.inFlight.WithLabelValues(w.opts.Connection).Dec()
		}
		m.backoff.DeleteLabelValues(w.opts.Connection, w.opts.Instance)
		m.confirmed.DeleteLabelValues(w.opts.Connection, w.opts.Instance)
	}
}
