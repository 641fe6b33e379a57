package subscribe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/gateway"
	"github.com/scadad/scadad/internal/lockedbuf"
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

// workerRig runs a worker on the wall clock inside a synctest bubble
// (every test below runs in one): time moves only when every goroutine of
// the bubble waits, so a test steps the worker's timers with time.Sleep and
// sees their whole effect after synctest.Wait, with no deadline to guess.
type workerRig struct {
	reg  *prometheus.Registry
	sub  *fakeSub
	w    *Worker
	stop func()
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
	r := &workerRig{reg: reg, sub: &fakeSub{}}
	r.w = NewWorker(r.sub, WorkerOptions{Connection: "conn-1", Instance: "Z28061", Policy: p,
		Rand: noJitter, Logger: log, Metrics: m})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.w.Run(ctx) }()
	r.stop = func() { cancel(); <-done }
	t.Cleanup(r.stop)
	synctest.Wait()
	if n := r.sub.n(); n != 1 {
		t.Fatalf("%d attempts at the start, want 1", n)
	}
	return r
}

// step lets d pass and the worker handle whatever fell due.
func (r *workerRig) step(t *testing.T, d time.Duration) {
	t.Helper()
	steps := r.w.Status().Steps
	time.Sleep(d)
	synctest.Wait()
	if r.w.Status().Steps == steps {
		t.Fatalf("the worker took no step in %v", d)
	}
}

// answer replies to attempt i and lets the worker handle the reply.
func (r *workerRig) answer(t *testing.T, i int, err error) {
	t.Helper()
	steps := r.w.Status().Steps
	r.sub.call(i).reply <- err
	synctest.Wait()
	if r.w.Status().Steps == steps {
		t.Fatalf("the worker did not handle the reply to attempt %d", i)
	}
}

// settled lets the worker run until every goroutine of the bubble waits,
// then checks cond.
func settled(t *testing.T, what string, cond func() bool) {
	t.Helper()
	synctest.Wait()
	if !cond() {
		t.Fatalf("once the worker waits: not %s", what)
	}
}

var fast = RetryPolicy{Floor: 200 * time.Millisecond, Max: 800 * time.Millisecond, InFlightCeiling: 2 * time.Second}

func TestWorkerNoDuplicatesWhileInFlightThenOneReissue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startWorker(t, fast)
		for range 9 { // 1.8 s of ticks
			r.step(t, 200*time.Millisecond)
		}
		if n := r.sub.n(); n != 1 {
			t.Fatalf("%d attempts while the first was in flight, want 1", n)
		}
		r.step(t, 200*time.Millisecond) // the ceiling
		settled(t, "re-issue after the ceiling", func() bool { return r.sub.n() == 2 })
		settled(t, "superseded attempt cancelled", func() bool { return r.sub.call(0).ctx.Err() != nil })
		if st := r.w.Status(); st.Attempts != 2 || st.Interval != 400*time.Millisecond {
			t.Fatalf("after presumed loss %+v, want attempt 2 and the backoff advanced to 400ms", st)
		}
		settled(t, "the cancelled attempt's reply ignored", func() bool { return r.w.Status().LastEvent == EventSuperseded })
		for range 4 { // ticks at the new 400 ms interval, up to 3.6 s < the new ceiling at 4 s
			r.step(t, 400*time.Millisecond)
		}
		if n := r.sub.n(); n != 2 {
			t.Fatalf("%d attempts, want exactly one re-issue", n)
		}
	})
}

func TestWorkerFailureBacksOffAndSuccessStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startWorker(t, fast)
		r.answer(t, 0, errors.New("gateway busy"))
		if iv := r.w.Status().Interval; iv != 400*time.Millisecond {
			t.Fatalf("interval after failure = %v, want 400ms", iv)
		}
		time.Sleep(399 * time.Millisecond)
		synctest.Wait()
		if r.sub.n() != 1 {
			t.Fatal("retried before the backoff elapsed")
		}
		r.step(t, time.Millisecond)
		settled(t, "retry", func() bool { return r.sub.n() == 2 })
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
		// Nothing is armed after success: an hour passes without a step.
		steps := r.w.Status().Steps
		time.Sleep(time.Hour)
		synctest.Wait()
		if r.w.Status().Steps != steps || r.sub.n() != 2 {
			t.Fatalf("after success a timer fired or an attempt went out: %+v, %d attempts", r.w.Status(), r.sub.n())
		}
	})
}

func TestWorkerConnectionGoodResetsBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startWorker(t, RetryPolicy{Floor: 200 * time.Millisecond, Max: 5 * time.Second, InFlightCeiling: time.Minute})
		for i := range 4 {
			r.answer(t, i, errors.New("busy"))
			r.step(t, r.w.Status().Interval)
			settled(t, "retry", func() bool { return r.sub.n() == i+2 })
		}
		r.answer(t, 4, errors.New("busy")) // next wait would be 5 s
		steps := r.w.Status().Steps
		r.w.ConnectionGood()
		settled(t, "reset", func() bool { return r.w.Status().Steps > steps })
		// No clock step: the retry goes out at once.
		settled(t, "retry at once after Good", func() bool { return r.sub.n() == 6 })
		if iv := r.w.Status().Interval; iv != 200*time.Millisecond {
			t.Fatalf("interval after Good = %v, want the 200ms floor", iv)
		}
	})
}

// A subscribe refused for want of a gateway session (the worker started
// as its node became Active, before the session opened) is no warning:
// the worker subscribes again as soon as the connection is good. Other
// failures stay warnings.
func TestWorkerWaitingForTheSessionIsNoWarning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs lockedbuf.Buffer
		r := startWorkerLogged(t, fast, zerolog.New(&logs))
		r.answer(t, 0, fmt.Errorf("subscribe 3 tags of Pump1: gateway gw: %w", gateway.ErrNotConnected))
		if got := logs.String(); strings.Contains(got, `"level":"warn"`) || !strings.Contains(got, "subscribe waits for the gateway session") {
			t.Fatalf("a subscribe refused for want of a session logged:\n%s", got)
		}
		r.w.ConnectionGood()
		settled(t, "retry at once when the session is good", func() bool { return r.sub.n() == 2 })
		r.answer(t, 1, errors.New("gateway busy"))
		if got := logs.String(); !strings.Contains(got, `"level":"warn"`) || !strings.Contains(got, "subscribe failed") {
			t.Fatalf("another failure was not a warning:\n%s", got)
		}
	})
}

func TestWorkerInvalidateResubscribes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startWorker(t, fast)
		r.answer(t, 0, nil)
		r.w.Invalidate()
		settled(t, "resubscribe", func() bool { return r.sub.n() == 2 })
		if r.w.Status().Confirmed {
			t.Fatal("still confirmed after invalidate")
		}
	})
}

func TestWorkerStopCancelsAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startWorker(t, fast)
		r.stop()
		if r.sub.call(0).ctx.Err() == nil {
			t.Fatal("attempt still live after the worker stopped")
		}
	})
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
