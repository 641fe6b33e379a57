package subscribe

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/gateway"
	"github.com/scadad/scadad/gateway/sim"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/role"
)

// fakeAlarmConn is an AlarmConn whose SubscribeAlarms calls the test
// answers by hand, counting per source how many are outstanding at once.
type fakeAlarmConn struct {
	mu       sync.Mutex
	calls    []*alarmCall
	inFlight map[string]int
	peak     map[string]int
}

type alarmCall struct {
	source string
	ctx    context.Context
	reply  chan alarmReply
}

type alarmReply struct {
	alarms []gateway.Alarm
	err    error
}

func (f *fakeAlarmConn) SubscribeAlarms(ctx context.Context, source string) ([]gateway.Alarm, error) {
	c := &alarmCall{source: source, ctx: ctx, reply: make(chan alarmReply, 1)}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.inFlight[source]++
	f.peak[source] = max(f.peak[source], f.inFlight[source])
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.inFlight[source]--; f.mu.Unlock() }()
	// A reply the test gives wins over a cancel: a late answer to a
	// superseded attempt is exactly what the guard must ignore.
	select {
	case r := <-c.reply:
		return r.alarms, r.err
	case <-ctx.Done():
		select {
		case r := <-c.reply:
			return r.alarms, r.err
		case <-time.After(50 * time.Millisecond):
			return nil, ctx.Err()
		}
	}
}

func (f *fakeAlarmConn) SubscribeTags(context.Context, []string) ([]gateway.ItemResult, error) {
	return nil, errors.New("no tags here")
}
func (f *fakeAlarmConn) RemoveItems(context.Context, []int32) error { return nil }
func (f *fakeAlarmConn) Run(ctx context.Context) error              { <-ctx.Done(); return nil }
func (f *fakeAlarmConn) Close() error                               { return nil }

func (f *fakeAlarmConn) n() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.calls) }
func (f *fakeAlarmConn) call(i int) *alarmCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[i]
}

// alarmSinkRec records snapshots and transitions.
type alarmSinkRec struct {
	mu        sync.Mutex
	snapshots map[string][][]gateway.Alarm
	changes   []gateway.Alarm
	refuse    error
}

func newAlarmSinkRec() *alarmSinkRec { return &alarmSinkRec{snapshots: map[string][][]gateway.Alarm{}} }

func (s *alarmSinkRec) AlarmSnapshot(_ context.Context, conn, source string, alarms []gateway.Alarm) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snapshots[source] = append(s.snapshots[source], alarms)
	return s.refuse
}

func (s *alarmSinkRec) AlarmChange(conn string, a gateway.Alarm) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changes = append(s.changes, a)
}

func (s *alarmSinkRec) snaps(source string) [][]gateway.Alarm {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]gateway.Alarm(nil), s.snapshots[source]...)
}

// alarmRig runs one alarm worker (the Worker the tag path uses, over the
// real alarmSubscription) against a fake connection, on the wall clock of
// the synctest bubble its test runs in (see workerRig).
type alarmRig struct {
	workerRig
	conn *fakeAlarmConn
	sink *alarmSinkRec
}

func startAlarmWorker(t *testing.T, p RetryPolicy) *alarmRig {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := &alarmRig{conn: &fakeAlarmConn{inFlight: map[string]int{}, peak: map[string]int{}}, sink: newAlarmSinkRec()}
	r.reg = reg
	c := &connection{cfg: ConnectionConfig{Name: "conn-1"}, conn: r.conn, alarms: r.sink, alarmSources: map[string]int{"Z28061": 1}}
	sub := &alarmSubscription{conn: c, source: "Z28061"}
	r.w = NewWorker(sub, WorkerOptions{Connection: "conn-1", Instance: alarmWorkerLabel("Z28061"), Policy: p,
		Rand: noJitter, Logger: zerolog.Nop(), Metrics: m})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.w.Run(ctx) }()
	r.stop = func() { cancel(); <-done }
	t.Cleanup(r.stop)
	settled(t, "one alarm subscribe at the start", func() bool { return r.conn.n() == 1 })
	return r
}

func (r *alarmRig) answer(t *testing.T, i int, alarms []gateway.Alarm, err error) {
	t.Helper()
	steps := r.w.Status().Steps
	r.conn.call(i).reply <- alarmReply{alarms, err}
	settled(t, "the reply handled", func() bool { return r.w.Status().Steps > steps })
}

func TestAlarmWorkerOneInFlightUntilCeilingThenOneReissue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startAlarmWorker(t, fast)
		for range 9 { // 1.8 s of ticks, below the 2 s ceiling
			r.step(t, 200*time.Millisecond)
		}
		if n := r.conn.n(); n != 1 {
			t.Fatalf("%d alarm subscribes while the first was in flight, want 1", n)
		}
		r.conn.mu.Lock()
		peak := r.conn.peak["Z28061"]
		r.conn.mu.Unlock()
		if peak != 1 {
			t.Fatalf("peak in flight for the source before the ceiling = %d, want 1", peak)
		}
		r.step(t, 200*time.Millisecond) // the ceiling
		settled(t, "re-issue after the ceiling", func() bool { return r.conn.n() == 2 })
		settled(t, "superseded attempt cancelled", func() bool { return r.conn.call(0).ctx.Err() != nil })
		if st := r.w.Status(); st.Attempts != 2 || st.Interval != 400*time.Millisecond {
			t.Fatalf("after presumed loss %+v, want attempt 2 and the backoff advanced to 400ms", st)
		}
		for range 4 {
			r.step(t, 400*time.Millisecond)
		}
		if n := r.conn.n(); n != 2 {
			t.Fatalf("%d alarm subscribes, want exactly one re-issue", n)
		}
	})
}

func TestAlarmWorkerBackoffDoublesToMaxAndSuccessResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startAlarmWorker(t, fast)
		want := []time.Duration{400 * time.Millisecond, 800 * time.Millisecond, 800 * time.Millisecond}
		for i, iv := range want {
			r.answer(t, i, nil, errors.New("gateway busy"))
			if got := r.w.Status().Interval; got != iv {
				t.Fatalf("interval after failure %d = %v, want %v", i+1, got, iv)
			}
			r.step(t, iv)
			settled(t, "retry after the backoff", func() bool { return r.conn.n() == i+2 })
		}
		r.answer(t, 3, []gateway.Alarm{{ID: "A1", Source: "Z28061", Active: true, Seq: 1}}, nil)
		st := r.w.Status()
		if !st.Confirmed || st.Interval != fast.Floor {
			t.Fatalf("after success %+v, want confirmed at the floor", st)
		}
		if s := r.sink.snaps("Z28061"); len(s) != 1 || len(s[0]) != 1 || s[0][0].ID != "A1" {
			t.Fatalf("snapshots %+v, want the one of the successful attempt", s)
		}
		// Nothing more is sent after a success, whatever the clock does.
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := r.conn.n(); n != 4 {
			t.Fatalf("%d subscribes after the success, want none more", n-4)
		}
	})
}

func TestAlarmWorkerConnectionGoodResetsBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startAlarmWorker(t, fast)
		r.answer(t, 0, nil, errors.New("busy"))
		r.step(t, 400*time.Millisecond)
		settled(t, "second attempt", func() bool { return r.conn.n() == 2 })
		r.answer(t, 1, nil, errors.New("busy"))
		if iv := r.w.Status().Interval; iv != 800*time.Millisecond {
			t.Fatalf("interval = %v, want 800ms", iv)
		}
		steps := r.w.Status().Steps
		r.w.ConnectionGood()
		settled(t, "reset handled", func() bool { return r.w.Status().Steps > steps })
		if iv := r.w.Status().Interval; iv != fast.Floor {
			t.Fatalf("interval after connection Good = %v, want the floor", iv)
		}
		// Unconfirmed and idle: Good subscribes at once.
		settled(t, "subscribe on Good", func() bool { return r.conn.n() == 3 })
	})
}

func TestAlarmWorkerSupersededReplyIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startAlarmWorker(t, fast)
		for range 10 { // to the ceiling: attempt 1 presumed lost, attempt 2 sent
			r.step(t, 200*time.Millisecond)
		}
		settled(t, "re-issue", func() bool { return r.conn.n() == 2 })
		// The late reply of attempt 1 arrives: a success that must neither
		// confirm attempt 2's guard nor reach the sink as the current state.
		r.conn.call(0).reply <- alarmReply{alarms: []gateway.Alarm{{ID: "OLD", Source: "Z28061", Active: true}}}
		settled(t, "stale reply handled", func() bool { return r.w.Status().LastEvent == EventSuperseded })
		if st := r.w.Status(); st.Confirmed || !st.InFlight {
			t.Fatalf("after a superseded reply %+v, want attempt 2 still in flight, unconfirmed", st)
		}
		if s := r.sink.snaps("Z28061"); len(s) != 0 {
			t.Fatalf("the superseded attempt's snapshot reached the sink: %+v", s)
		}
		r.answer(t, 1, nil, nil)
		if st := r.w.Status(); !st.Confirmed {
			t.Fatalf("the live attempt's success did not confirm: %+v", st)
		}
	})
}

func TestAlarmWorkerTickRacingSuccessSendsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startAlarmWorker(t, fast)
		// The reply and the watchdog tick come together: whichever the worker
		// takes first, no second subscribe may follow a success.
		go func() {
			time.Sleep(200 * time.Millisecond)
			r.conn.call(0).reply <- alarmReply{}
		}()
		time.Sleep(200 * time.Millisecond)
		settled(t, "confirmed", func() bool { return r.w.Status().Confirmed })
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if n := r.conn.n(); n != 1 {
			t.Fatalf("%d subscribes, want 1: a tick racing the success re-sent", n)
		}
	})
}

// TestAlarmStormOneInFlightPerSource is the storm on the alarm path: the
// gateway wedges with 20 alarm sources subscribing. Each source keeps at
// most one subscribe in flight, and all are subscribed soon after the
// wedge ends (the benchmark runs the 60 s wedge; this one is scaled down).
func TestAlarmStormOneInFlightPerSource(t *testing.T) {
	s := sim.New(sim.Config{})
	addr, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	for i := range 20 {
		if err := s.RaiseAlarm(sim.AlarmSpec{ID: fmt.Sprintf("A%02d", i), Source: fmt.Sprintf("S%02d", i), Severity: 500, Condition: "Hi"}); err != nil {
			t.Fatal(err)
		}
	}
	wedge := 3 * time.Second
	s.Wedge(wedge)
	wedgeEnds := time.Now().Add(wedge)
	cfg := Config{Connections: []ConnectionConfig{{Name: "mx1", Endpoint: addr, Options: ConnectionOptions{ProbeInterval: -1}}}}
	for i := range 20 {
		cfg.AlarmSources = append(cfg.AlarmSources, AlarmSourceConfig{Connection: "mx1", Source: fmt.Sprintf("S%02d", i)})
	}
	roles := role.NewBroadcaster(role.State{Role: role.Active})
	sink := newAlarmSinkRec()
	floor := 200 * time.Millisecond
	m := runManager(t, Options{Role: roles, Sink: newMemSink(), Alarms: sink,
		Policy: RetryPolicy{Floor: floor, Max: 2 * time.Second, InFlightCeiling: 10 * time.Second}}, cfg)
	testwait.For(t, 30*time.Second, "every source subscribed", func() bool {
		for i := range 20 {
			if len(sink.snaps(fmt.Sprintf("S%02d", i))) == 0 {
				return false
			}
		}
		return true
	})
	if late := time.Since(wedgeEnds); late > floor+time.Second {
		t.Fatalf("all sources subscribed %v after the wedge ended, want <= floor + 1s", late)
	}
	st := s.Stats()
	if st.Alarms.PeakInFlightPerSource != 1 {
		t.Fatalf("peak alarm subscribes in flight per source = %d, want 1", st.Alarms.PeakInFlightPerSource)
	}
	for i := range 20 {
		if n := st.Alarms.Subscribes[fmt.Sprintf("S%02d", i)]; n != 1 {
			t.Errorf("source S%02d subscribed %d times, want 1 (in flight through the wedge)", i, n)
		}
	}
	confirmed := 0
	for _, w := range m.Status() {
		if w.Confirmed {
			confirmed++
		}
	}
	if confirmed != 20 {
		t.Fatalf("%d alarm workers confirmed, want 20", confirmed)
	}
	// A transition after the subscribe streams to the sink.
	if err := s.ClearAlarm("A07"); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "clear streamed", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for _, a := range sink.changes {
			if a.ID == "A07" && !a.Active {
				return true
			}
		}
		return false
	})
}

// A snapshot the sink cannot record (the node is not the Active yet) fails
// the attempt: the worker retries instead of counting a refresh nobody
// recorded as confirmed.
func TestAlarmWorkerSnapshotRefusedBySinkRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startAlarmWorker(t, fast)
		r.sink.mu.Lock()
		r.sink.refuse = errors.New("not the Active")
		r.sink.mu.Unlock()
		r.answer(t, 0, []gateway.Alarm{{ID: "A1", Source: "Z28061", Active: true}}, nil)
		if st := r.w.Status(); st.Confirmed || st.LastEvent != EventFailed {
			t.Fatalf("after a refused snapshot %+v, want a failed, unconfirmed attempt", st)
		}
		r.sink.mu.Lock()
		r.sink.refuse = nil
		r.sink.mu.Unlock()
		r.step(t, 400*time.Millisecond)
		settled(t, "retry", func() bool { return r.conn.n() == 2 })
		r.answer(t, 1, nil, nil)
		if !r.w.Status().Confirmed {
			t.Fatal("the retry's recorded snapshot did not confirm")
		}
	})
}
