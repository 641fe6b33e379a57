// Package clocktest holds the one fake clock of the tests: time moves only
// when the test says so, and timers fire when it passes them.
package clocktest

import (
	"sync"
	"time"

	"github.com/scadad/scadad/internal/clock"
)

// Fake is a manual clock. The zero value is not usable; make one with New.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*timer
	created int
}

type timer struct {
	c       *Fake
	when    time.Time
	ch      chan time.Time
	stopped bool
}

// New is a fake clock standing at t0.
func New(t0 time.Time) *Fake { return &Fake{now: t0} }

// Now is the fake time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After fires once the fake time has moved d on (at once for d ≤ 0).
func (c *Fake) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C() }

// NewTimer is a timer that fires once the fake time has moved d on.
func (c *Fake) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, when: c.now.Add(d), ch: make(chan time.Time, 1)}
	c.created++
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	return t
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

// Advance moves the time on by d and fires the timers that came due.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.stopped {
			continue
		}
		if !t.when.After(c.now) {
			t.ch <- c.now
			continue
		}
		kept = append(kept, t)
	}
	c.timers = kept
}

// FireAll fires every waiting timer without moving the time: for tests
// that decide when a wait ends, not how long it was.
func (c *Fake) FireAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.timers {
		if !t.stopped {
			t.ch <- c.now
		}
	}
	c.timers = nil
}

// Waiting is how many timers wait to fire.
func (c *Fake) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.stopped {
			n++
		}
	}
	return n
}

// WaitingAt reports whether a timer waits to fire exactly at at.
func (c *Fake) WaitingAt(at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.timers {
		if !t.stopped && t.when.Equal(at) {
			return true
		}
	}
	return false
}

// Created is how many timers were made so far.
func (c *Fake) Created() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.created
}

// Fast is the wall clock with every wait divided by factor: for tests of
// cadences (keep-alives, read checks) that must run against a real peer.
func Fast(factor int) clock.Clock { return fast{factor: time.Duration(factor)} }

type fast struct{ factor time.Duration }

func (fast) Now() time.Time                           { return time.Now() }
func (f fast) After(d time.Duration) <-chan time.Time { return time.After(d / f.factor) }
func (f fast) NewTimer(d time.Duration) clock.Timer {
	return clock.System().NewTimer(d / f.factor)
}
