package subscribe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/gateway"
	"github.com/scadad/scadad/internal/clock/clocktest"
	"github.com/scadad/scadad/internal/lockedbuf"
	"github.com/scadad/scadad/internal/testwait"
)

// fakeSub is a Subscription whose attempts the test answers by hand.
type fakeSub struct {
	mu    sync.Mutex
	calls []*fakeCall
}

type fakeCall struct {
	ctx   context.Context
	reply chan error
}

func (f *fakeSub) Subscribe(ctx context.Context) error {
	c := &fakeCall{ctx: ctx, reply: make(chan error, 1)}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	select {
	case err := <-c.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeSub) n() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeSub) call(i int) *fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[i]
}

type workerRig struct {
	reg   *prometheus.Registry
	clock *clocktest.Fake
	sub   *fakeSub
	w     *Worker
	stop  func()
}

func startWorker(t *testing.T, p RetryPolicy) *workerRig {
	t.Helper()
	return startWorkerLogged(t, p, zerolog.Nop())
}

func startWorkerLogged(t *testing.T, p RetryPolicy, log zerolog.Logger) *workerRig {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := &workerRig{reg: reg, clock: clocktest.New(t0), sub: &fakeSub{}}
	r.w = NewWorker(r.sub, WorkerOptions{Connection: "conn-1", Instance: "Z28061", Policy: p,
		Clock: r.clock, Rand: noJitter, Logger: log, Metrics: m})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.w.Run(ctx) }()
	r.stop = func() { cancel(); <-done }
	t.Cleanup(r.stop)
	testwait.For(t, 10*time.Second, "first attempt", func() bool { return r.sub.n() == 1 })
	return r
}

// step advances the clock by d and waits until the worker has handled the
// tick (it arms a new timer or records a step).
func (r *workerRig) step(t *testing.T, d time.Duration) {
	t.Helper()
	steps := r.w.Status().Steps
	r.clock.Advance(d)
	testwait.For(t, 10*time.Second, "worker step", func() bool { return r.w.Status().Steps > steps })
}

// idle waits until the worker waits on a timer (or has none to wait on).
func (r *workerRig) idle(t *testing.T) {
	t.Helper()
	testwait.For(t, 10*time.Second, "worker idle", func() bool {
		st := r.w.Status()
		return r.clock.Waiting() == 1 || (st.Confirmed && r.clock.Waiting() == 0)
	})

}

func (r *workerRig) answer(t *testing.T, i int, err error) {
	t.Helper()
	steps := r.w.Status().Steps
	r.sub.call(i).reply <- err
	testwait.For(t, 10*time.Second, "reply handled", func() bool { return r.w.Status().Steps > steps })
	r.idle(t)
}

var fast = RetryPolicy{Floor: 200 * time.Millisecond, Max: 800 * time.Millisecond, InFlightCeiling: 2 * time.Second}

func TestWorkerNoDuplicatesWhileInFlightThenOneReissue(t *testing.T) {
	r := startWorker(t, fast)
	r.idle(t)
	for range 9 { // 1.8 s of ticks
		r.step(t, 200*time.Millisecond)
		r.idle(t)
	}
	if n := r.sub.n(); n != 1 {
		t.Fatalf("%d attempts while the first was in flight, want 1", n)
	}
	r.step(t, 200*time.Millisecond) // the ceiling
	testwait.For(t, 10*time.Second, "re-issue after the ceiling", func() bool { return r.sub.n() == 2 })
	testwait.For(t, 10*time.Second, "superseded attempt cancelled", func() bool { return r.sub.call(0).ctx.Err() != nil })
	if st := r.w.Status(); st.Attempts != 2 || st.Interval != 400*time.Millisecond {
		t.Fatalf("after presumed loss %+v, want attempt 2 and the backoff advanced to 400ms", st)
	}
	testwait.For(t, 10*time.Second, "the cancelled attempt's reply ignored", func() bool { return r.w.Status().LastEvent == EventSuperseded })
	r.idle(t)
	for range 4 { // ticks at the new 400 ms interval, up to 3.6 s < the new ceiling at 4 s
		r.step(t, 400*time.Millisecond)
		r.idle(t)
	}
	if n := r.sub.n(); n != 2 {
		t.Fatalf("%d attempts, want exactly one re-issue", n)
	}
}

func TestWorkerFailureBacksOffAndSuccessStops(t *testing.T) {
	r := startWorker(t, fast)
	r.answer(t, 0, errors.New("gateway busy"))
	if iv := r.w.Status().Interval; iv != 400*time.Millisecond {
		t.Fatalf("interval after failure = %v, want 400ms", iv)
	}
	r.clock.Advance(399 * time.Millisecond)
	if r.clock.Waiting() != 1 || r.sub.n() != 1 {
		t.Fatal("retried before the backoff elapsed")
	}
	r.step(t, time.Millisecond)
	testwait.For(t, 10*time.Second, "retry", func() bool { return r.sub.n() == 2 })
	r.idle(t)
	r.answer(t, 1, nil)
	st := r.w.Status()
	if !st.Confirmed || st.Interval != fast.Floor {
		t.Fatalf("after success %+v, want confirmed at the floor", st)
	}
	// The site instance is the label site_instance: "instance" is the
	// scrape target's label in Prometheus (the alert rules rely on this).
	if got := confirmedSeries(t, r.reg); got != "connection=conn-1,site_instance=Z28061 1" {
		t.Fatalf("scadad_subscribe_confirmed = %q, want connection=conn-1,site_instance=Z28061 1", got)
	}
	if r.clock.Waiting() != 0 {
		t.Fatalf("%d watchdogs armed after success", r.clock.Waiting())
	}
	r.clock.Advance(time.Hour)
	if r.sub.n() != 2 {
		t.Fatal("attempt after success")
	}
}

func TestWorkerConnectionGoodResetsBackoff(t *testing.T) {
	r := startWorker(t, RetryPolicy{Floor: 200 * time.Millisecond, Max: 5 * time.Second, InFlightCeiling: time.Minute})
	for i := range 4 {
		r.answer(t, i, errors.New("busy"))
		r.step(t, r.w.Status().Interval)
		testwait.For(t, 10*time.Second, "retry", func() bool { return r.sub.n() == i+2 })
		r.idle(t)
	}
	r.answer(t, 4, errors.New("busy")) // next wait would be 5 s
	steps := r.w.Status().Steps
	r.w.ConnectionGood()
	testwait.For(t, 10*time.Second, "reset", func() bool { return r.w.Status().Steps > steps })
	// No clock step: the retry goes out at once.
	testwait.For(t, 10*time.Second, "retry at once after Good", func() bool { return r.sub.n() == 6 })
	if iv := r.w.Status().Interval; iv != 200*time.Millisecond {
		t.Fatalf("interval after Good = %v, want the 200ms floor", iv)
	}
}

// A subscribe refused for want of a gateway session (the worker started
// as its node became Active, before the session opened) is no warning:
// the worker subscribes again as soon as the connection is good. Other
// failures stay warnings.
func TestWorkerWaitingForTheSessionIsNoWarning(t *testing.T) {
	var logs lockedbuf.Buffer
	r := startWorkerLogged(t, fast, zerolog.New(&logs))
	r.answer(t, 0, fmt.Errorf("subscribe 3 tags of Pump1: gateway gw: %w", gateway.ErrNotConnected))
	if got := logs.String(); strings.Contains(got, `"level":"warn"`) || !strings.Contains(got, "subscribe waits for the gateway session") {
		t.Fatalf("a subscribe refused for want of a session logged:\n%s", got)
	}
	r.w.ConnectionGood()
	testwait.For(t, 10*time.Second, "retry at once when the session is good", func() bool { return r.sub.n() == 2 })
	r.answer(t, 1, errors.New("gateway busy"))
	if got := logs.String(); !strings.Contains(got, `"level":"warn"`) || !strings.Contains(got, "subscribe failed") {
		t.Fatalf("another failure was not a warning:\n%s", got)
	}
}

func TestWorkerInvalidateResubscribes(t *testing.T) {
	r := startWorker(t, fast)
	r.answer(t, 0, nil)
	r.w.Invalidate()
	testwait.For(t, 10*time.Second, "resubscribe", func() bool { return r.sub.n() == 2 })
	if r.w.Status().Confirmed {
		t.Fatal("still confirmed after invalidate")
	}
}

func TestWorkerStopCancelsAttempt(t *testing.T) {
	r := startWorker(t, fast)
	r.stop()
	if r.sub.call(0).ctx.Err() == nil {
		t.Fatal("attempt still live after the worker stopped")
	}
}

// confirmedSeries renders the scadad_subscribe_confirmed series as
// "name=value,... value", one per line.
func confirmedSeries(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, mf := range mfs {
		if mf.GetName() != "scadad_subscribe_confirmed" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			lines = append(lines, fmt.Sprintf("%s %g", strings.Join(labels, ","), m.GetGauge().GetValue()))
		}
	}
	return strings.Join(lines, "\n")
}
