package subscribe

import (
	"time"

	"github.com/scadad/scadad/internal/backoff"
)

// Event names what a Guard step decided; the worker logs by it.
type Event int

// The steps a Guard can take.
const (
	// EventNone: nothing to do (e.g. a watchdog tick after a success).
	EventNone Event = iota
	// EventSubscribe: send a new attempt (first, or after a failure's wait).
	EventSubscribe
	// EventStillInFlight: an attempt is outstanding and younger than the
	// ceiling; no new one is sent, the watchdog is re-armed.
	EventStillInFlight
	// EventPresumedLost: the outstanding attempt passed the ceiling; it is
	// superseded, the backoff advances and a new attempt is sent at once.
	EventPresumedLost
	// EventConfirmed: the live attempt succeeded; backoff reset, no watchdog.
	EventConfirmed
	// EventFailed: the live attempt failed; backoff advanced, retry when due.
	EventFailed
	// EventSuperseded: a reply for an attempt that is no longer live; ignored.
	EventSuperseded
	// EventReset: the connection came back Good; backoff reset to the floor.
	EventReset
	// EventInvalidated: the subscription is gone (new gateway session); any
	// outstanding attempt is superseded and a new one sent at once.
	EventInvalidated
	// EventLost: the connection went bad; the subscription serves nothing
	// until it is back, so it no longer counts as confirmed.
	EventLost
)

func (e Event) String() string {
	return [...]string{"none", "subscribe", "still in flight", "presumed lost", "confirmed",
		"failed", "superseded reply ignored", "reset", "invalidated", "connection lost"}[e]
}

// Decision is what a Guard step asks its driver to do.
type Decision struct {
	Event Event
	// Send is the id of a new attempt to start, 0 for none.
	Send uint64
	// Cancel is the id of an attempt that is superseded, 0 for none.
	Cancel uint64
	// Age is how long the outstanding attempt had been in flight (for logs).
	Age time.Duration
}

// Guard is the Lever 1 state of one subscription, a pure state machine: the
// caller feeds it the time and the events, it says when to send and when it
// wants its next watchdog tick (Due). It is not safe for concurrent use.
type Guard struct {
	policy RetryPolicy
	rand   func() float64

	interval  time.Duration
	lastID    uint64
	inFlight  uint64
	sentAt    time.Time
	confirmed bool
	due       time.Time
}

// NewGuard returns a guard with the backoff at the policy's floor. rand
// returns a uniform sample in [0,1) for jitter.
func NewGuard(policy RetryPolicy, rand func() float64) *Guard {
	policy = policy.withDefaults()
	return &Guard{policy: policy, rand: rand, interval: policy.Floor}
}

// Interval is the wait the next retry will use.
func (g *Guard) Interval() time.Duration { return g.interval }

// Due is when the guard wants its next Tick; zero means no watchdog (the
// subscription is confirmed).
func (g *Guard) Due() time.Time { return g.due }

// InFlight is the id of the outstanding attempt, 0 if none.
func (g *Guard) InFlight() uint64 { return g.inFlight }

// Confirmed reports whether the latest attempt succeeded.
func (g *Guard) Confirmed() bool { return g.confirmed }

// Start sends the first attempt.
func (g *Guard) Start(now time.Time) Decision {
	return g.send(now, Decision{Event: EventSubscribe})
}

// Tick handles the watchdog firing at now.
func (g *Guard) Tick(now time.Time) Decision {
	switch {
	case g.confirmed:
		// Closes the cancel race: a tick that raced a success does nothing.
		g.due = time.Time{}
		return Decision{Event: EventNone}
	case g.inFlight != 0:
		age := now.Sub(g.sentAt)
		if age < g.policy.InFlightCeiling {
			g.armInFlight(now)
			return Decision{Event: EventStillInFlight, Age: age}
		}
		lost := g.inFlight
		g.backOff()
		return g.send(now, Decision{Event: EventPresumedLost, Cancel: lost, Age: age})
	case now.Before(g.due):
		return Decision{Event: EventNone}
	default:
		return g.send(now, Decision{Event: EventSubscribe})
	}
}

// Reply handles the outcome of attempt id.
func (g *Guard) Reply(now time.Time, id uint64, failed bool) Decision {
	if id == 0 || id != g.inFlight {
		return Decision{Event: EventSuperseded}
	}
	age := now.Sub(g.sentAt)
	g.inFlight = 0
	if !failed {
		g.confirmed = true
		g.interval = g.policy.Floor
		g.due = time.Time{}
		return Decision{Event: EventConfirmed, Age: age}
	}
	g.backOff()
	g.due = now.Add(g.interval)
	return Decision{Event: EventFailed, Age: age}
}

// ConnectionGood resets the backoff to the floor. An unconfirmed
// subscription with no attempt in flight subscribes at once: its last
// attempt most likely failed for want of the connection (a node that has
// just become Active starts its workers before the gateway session is
// open), and waiting out even the floor would leave the field data Bad for
// seconds after a failover. An attempt in flight keeps the guard: the
// in-flight rule alone stops a storm from stacking.
func (g *Guard) ConnectionGood(now time.Time) Decision {
	g.interval = g.policy.Floor
	switch {
	case g.confirmed:
		return Decision{Event: EventReset}
	case g.inFlight != 0:
		g.armInFlight(now)
		return Decision{Event: EventReset}
	}
	return g.send(now, Decision{Event: EventReset})
}

// ConnectionLost is called when the connection goes bad: a confirmed
// subscription no longer delivers anything, so it stops counting as
// confirmed (status, metrics and alerts then say so). Nothing is sent: the
// connection coming back (Good, or a new session) resubscribes.
func (g *Guard) ConnectionLost(now time.Time) Decision {
	g.confirmed = false
	return Decision{Event: EventLost}
}

// Invalidate is called when the subscription is known to be gone (the
// gateway session it lived on was replaced): resubscribe at once from the
// floor; an outstanding attempt belongs to the dead session and is
// superseded.
func (g *Guard) Invalidate(now time.Time) Decision {
	g.confirmed = false
	g.interval = g.policy.Floor
	return g.send(now, Decision{Event: EventInvalidated, Cancel: g.inFlight})
}

func (g *Guard) send(now time.Time, d Decision) Decision {
	g.lastID++
	g.inFlight = g.lastID
	g.sentAt = now
	g.confirmed = false
	g.armInFlight(now)
	d.Send = g.inFlight
	return d
}

// armInFlight sets the watchdog to the next interval tick, but never past
// the moment the outstanding attempt reaches the ceiling.
func (g *Guard) armInFlight(now time.Time) {
	g.due = now.Add(g.interval)
	if lost := g.sentAt.Add(g.policy.InFlightCeiling); lost.Before(g.due) {
		g.due = lost
	}
}

func (g *Guard) backOff() {
	g.interval = backoff.Next(g.interval, g.policy.Floor, g.policy.Max, g.rand())
}
