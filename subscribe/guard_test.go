package subscribe

import (
	"testing"
	"time"

	"github.com/scadad/scadad/internal/backoff"
)

var t0 = time.Date(2026, 8, 26, 10, 0, 0, 0, time.UTC)

func noJitter() float64 { return 0.5 }

// drive ticks g at every due time until (but excluding) until and returns
// the decisions.
func drive(g *Guard, until time.Time) []Decision {
	var out []Decision
	for !g.Due().IsZero() && g.Due().Before(until) {
		out = append(out, g.Tick(g.Due()))
	}
	return out
}

func sends(ds []Decision) int {
	n := 0
	for _, d := range ds {
		if d.Send != 0 {
			n++
		}
	}
	return n
}

func testPolicy() RetryPolicy {
	return RetryPolicy{Floor: 5 * time.Second, Max: 60 * time.Second, InFlightCeiling: 45 * time.Second}
}

func TestGuardNoDuplicatesWhileInFlight(t *testing.T) {
	g := NewGuard(testPolicy(), noJitter)
	first := g.Start(t0)
	if first.Send == 0 {
		t.Fatal("Start did not send")
	}
	ds := drive(g, t0.Add(45*time.Second))
	if len(ds) != 8 { // ticks at 5,10,...,40 s
		t.Fatalf("got %d ticks before the ceiling, want 8", len(ds))
	}
	for _, d := range ds {
		if d.Event != EventStillInFlight || d.Send != 0 {
			t.Fatalf("tick inside the ceiling decided %+v", d)
		}
	}
}

func TestGuardReissuesAfterCeilingOnce(t *testing.T) {
	g := NewGuard(testPolicy(), noJitter)
	first := g.Start(t0)
	drive(g, t0.Add(45*time.Second))
	if g.Due() != t0.Add(45*time.Second) {
		t.Fatalf("watchdog due %v, want exactly the ceiling", g.Due().Sub(t0))
	}
	d := g.Tick(g.Due())
	if d.Event != EventPresumedLost || d.Send == 0 || d.Cancel != first.Send {
		t.Fatalf("at the ceiling got %+v, want presumed lost cancelling %d", d, first.Send)
	}
	if g.Interval() != 10*time.Second {
		t.Fatalf("interval after presumed loss = %v, want 10s", g.Interval())
	}
	// The new attempt is itself guarded for a whole ceiling.
	if n := sends(drive(g, t0.Add(90*time.Second))); n != 0 {
		t.Fatalf("%d sends inside the second ceiling window", n)
	}
}

func TestGuardUnansweredFor110sSendsThree(t *testing.T) {
	// The seed's live gate: one request per ceiling, 3 in ~110 s.
	g := NewGuard(testPolicy(), func() float64 { return 0.3 })
	n := sends([]Decision{g.Start(t0)}) + sends(drive(g, t0.Add(110*time.Second)))
	if n != 3 {
		t.Fatalf("sent %d requests in 110 s, want 3", n)
	}
}

func TestGuardSupersededReplyIgnored(t *testing.T) {
	g := NewGuard(testPolicy(), noJitter)
	first := g.Start(t0)
	drive(g, t0.Add(45*time.Second))
	second := g.Tick(g.Due())
	// A late success for the first id must not confirm the second.
	if d := g.Reply(t0.Add(46*time.Second), first.Send, false); d.Event != EventSuperseded {
		t.Fatalf("late reply decided %+v, want superseded", d)
	}
	if g.Confirmed() || g.InFlight() != second.Send || g.Due().IsZero() {
		t.Fatalf("superseded reply changed state: confirmed=%v inflight=%d due=%v", g.Confirmed(), g.InFlight(), g.Due())
	}
	// The live one still governs.
	if d := g.Reply(t0.Add(47*time.Second), second.Send, false); d.Event != EventConfirmed {
		t.Fatalf("live reply decided %+v", d)
	}
}

func TestGuardLateReplyForFailedAndReissuedIgnored(t *testing.T) {
	g := NewGuard(testPolicy(), noJitter)
	first := g.Start(t0)
	g.Reply(t0.Add(time.Second), first.Send, true)
	second := g.Tick(g.Due())
	if second.Send == 0 {
		t.Fatal("no retry after a failure")
	}
	if d := g.Reply(g.Due(), first.Send, false); d.Event != EventSuperseded {
		t.Fatalf("duplicate reply for the failed attempt decided %+v", d)
	}
	if g.InFlight() != second.Send {
		t.Fatal("the live attempt lost its slot")
	}
}

func TestGuardFailureFreesSlotAndBacksOff(t *testing.T) {
	tests := []struct {
		name         string
		jitter       float64
		wantInterval []time.Duration
	}{
		{"no jitter", 0.5, []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 60 * time.Second, 60 * time.Second}},
		{"-20% jitter", 0, []time.Duration{8 * time.Second, 12800 * time.Millisecond, 20480 * time.Millisecond, 32768 * time.Millisecond, 52428800 * time.Microsecond}},
		{"+20% jitter", 1, []time.Duration{12 * time.Second, 28800 * time.Millisecond, 60 * time.Second, 60 * time.Second, 60 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewGuard(testPolicy(), func() float64 { return tt.jitter })
			now := t0
			d := g.Start(now)
			for i, want := range tt.wantInterval {
				now = now.Add(time.Second)
				r := g.Reply(now, d.Send, true)
				if r.Event != EventFailed || g.InFlight() != 0 {
					t.Fatalf("failure %d: %+v inflight=%d", i, r, g.InFlight())
				}
				if got := g.Interval(); got != want {
					t.Fatalf("failure %d: interval %v, want %v", i, got, want)
				}
				if early := g.Tick(g.Due().Add(-time.Millisecond)); early.Send != 0 {
					t.Fatalf("retried before the backoff elapsed")
				}
				now = g.Due()
				d = g.Tick(now)
				if d.Event != EventSubscribe || d.Send == 0 {
					t.Fatalf("no retry when due: %+v", d)
				}
			}
		})
	}
}

func TestGuardSuccessResetsAndStopsRetrying(t *testing.T) {
	g := NewGuard(testPolicy(), noJitter)
	d := g.Start(t0)
	for range 3 {
		g.Reply(t0, d.Send, true)
		d = g.Tick(g.Due())
	}
	if g.Interval() != 40*time.Second {
		t.Fatalf("interval = %v, want 40s", g.Interval())
	}
	now := g.Due()
	if r := g.Reply(now, d.Send, false); r.Event != EventConfirmed {
		t.Fatalf("success decided %+v", r)
	}
	if g.Interval() != 5*time.Second || !g.Due().IsZero() {
		t.Fatalf("after success interval=%v due=%v, want floor and no watchdog", g.Interval(), g.Due())
	}
	// The cancel race: a tick that was already on its way does nothing.
	if r := g.Tick(now); r.Send != 0 || r.Event != EventNone {
		t.Fatalf("stale tick after success decided %+v", r)
	}
}

func TestGuardConnectionGoodResets(t *testing.T) {
	g := NewGuard(testPolicy(), noJitter)
	d := g.Start(t0)
	now := t0
	for range 4 {
		now = now.Add(time.Second)
		g.Reply(now, d.Send, true)
		now = g.Due()
		d = g.Tick(now)
	}
	now = now.Add(time.Second)
	g.Reply(now, d.Send, true) // the next retry would wait 60 s
	if g.Due().Sub(now) != 60*time.Second {
		t.Fatalf("due in %v, want 60s", g.Due().Sub(now))
	}
	good := g.ConnectionGood(now)
	if good.Send == 0 || good.Event != EventReset {
		t.Fatalf("Good after failures decided %+v; want a new attempt at once", good)
	}
	if g.Interval() != 5*time.Second {
		t.Fatalf("after Good the interval is %v, want the 5s floor", g.Interval())
	}
	// The new attempt fails too: the next waits the floor, not 60 s.
	now = now.Add(time.Second)
	g.Reply(now, good.Send, true)
	if want := now.Add(backoff.Next(5*time.Second, 5*time.Second, 60*time.Second, noJitter())); !g.Due().Equal(want) {
		t.Fatalf("after a failure following Good due at %v, want %v", g.Due().Sub(now), want.Sub(now))
	}
}

func TestGuardGoodWhileInFlightKeepsGuard(t *testing.T) {
	g := NewGuard(testPolicy(), noJitter)
	g.Start(t0)
	g.ConnectionGood(t0.Add(time.Second))
	if n := sends(drive(g, t0.Add(45*time.Second))); n != 0 {
		t.Fatalf("Good while in flight caused %d duplicate sends", n)
	}
}

func TestGuardInvalidateResubscribesAtOnce(t *testing.T) {
	g := NewGuard(testPolicy(), noJitter)
	d := g.Start(t0)
	g.Reply(t0, d.Send, false)
	r := g.Invalidate(t0.Add(time.Minute))
	if r.Send == 0 || g.Confirmed() {
		t.Fatalf("invalidate decided %+v", r)
	}
	inflight := g.Invalidate(t0.Add(2 * time.Minute))
	if inflight.Cancel != r.Send {
		t.Fatalf("invalidate with an attempt outstanding must cancel it: %+v", inflight)
	}
}

// TestGuardConnectionLost: a confirmed subscription stops counting as
// confirmed when its connection goes bad, sends nothing while it is down,
// and resubscribes at once when it is good again.
func TestGuardConnectionLost(t *testing.T) {
	g := NewGuard(testPolicy(), noJitter)
	d := g.Start(t0)
	g.Reply(t0.Add(time.Second), d.Send, false)
	if !g.Confirmed() {
		t.Fatal("not confirmed after a successful reply")
	}
	lost := g.ConnectionLost(t0.Add(2 * time.Second))
	if lost.Event != EventLost || lost.Send != 0 || g.Confirmed() {
		t.Fatalf("connection lost decided %+v, confirmed %v; want no send and not confirmed", lost, g.Confirmed())
	}
	if n := sends(drive(g, t0.Add(10*time.Minute))); n != 0 {
		t.Fatalf("%d attempts while the connection was down", n)
	}
	if good := g.ConnectionGood(t0.Add(11 * time.Minute)); good.Send == 0 {
		t.Fatalf("connection good after a loss decided %+v; want a new attempt at once", good)
	}
}
