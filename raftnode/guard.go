package raftnode

import (
	"fmt"
	"sync"
	"time"

	"github.com/scadad/scadad/internal/clock"
)

// contacts remembers when each peer last showed a sign of life: raft bytes
// in either direction, an inbound connection, or a probe handshake. A peer
// never heard from counts from the tracker's creation, so a cold-started
// node waits a full window before it may override.
type contacts struct {
	clock clock.Clock
	start time.Time
	mu    sync.Mutex
	last  map[string]time.Time
}

func newContacts(c clock.Clock) *contacts {
	return &contacts{clock: c, start: c.Now(), last: make(map[string]time.Time)}
}

func (c *contacts) touch(id string) {
	now := c.clock.Now()
	c.mu.Lock()
	if now.After(c.last[id]) {
		c.last[id] = now
	}
	c.mu.Unlock()
}

// touchAt records contact seen at t by someone else's clock (raft's
// LastContact), unless a later one is already known.
func (c *contacts) touchAt(id string, t time.Time) {
	if t.IsZero() {
		return
	}
	c.mu.Lock()
	if t.After(c.last[id]) {
		c.last[id] = t
	}
	c.mu.Unlock()
}

// lastContact returns when id was last heard from, and whether it ever was.
func (c *contacts) lastContact(id string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.last[id]
	if !ok {
		return c.start, false
	}
	return t, true
}

// restartWindow makes every peer's silence count from now: after an
// override or restart nobody may reuse silence measured before it.
func (c *contacts) restartWindow() {
	now := c.clock.Now()
	c.mu.Lock()
	c.start = now
	for id, t := range c.last {
		if t.Before(now) {
			c.last[id] = now
		}
	}
	c.mu.Unlock()
}

// overrideInput is everything the automatic override decision looks at.
type overrideInput struct {
	now         time.Time
	mode        Mode
	after       time.Duration
	isLeader    bool
	selfVoter   bool
	recovering  bool
	otherVoters []string
	lastContact func(id string) time.Time
}

// overrideDue decides whether a pair-mode node must re-form the cluster
// alone. It is pure so the window logic is tested without a cluster; the
// caller still re-probes the peer right before acting.
func overrideDue(in overrideInput) (bool, string) {
	switch {
	case in.mode != ModePair:
		return false, "mode " + string(in.mode) + " never overrides"
	case in.recovering:
		return false, "recovery in progress"
	case in.isLeader:
		return false, "already leader"
	case !in.selfVoter:
		return false, "not a voter in the current configuration"
	case len(in.otherVoters) == 0:
		return false, "already the sole voter"
	}
	for _, id := range in.otherVoters {
		silent := in.now.Sub(in.lastContact(id))
		if silent < in.after {
			return false, fmt.Sprintf("peer %s heard from %s ago (window %s)", id, silent.Round(time.Millisecond), in.after)
		}
	}
	return true, fmt.Sprintf("no contact with %v for %s", in.otherVoters, in.after)
}

// overrideNoticeAfter is how long every other voter must have been silent
// before a pair-mode node says when it will override: longer than a missed
// heartbeat or two, well inside any sensible override_after.
const overrideNoticeAfter = time.Second

// overrideTickMargin puts the guard's tick at an override's due time
// just past it, so the tick finds the override due.
const overrideTickMargin = 5 * time.Millisecond

// nextGuardTick is how long the guard waits before its next tick: the
// (jittered) probe interval, or until just past overrideAt when the
// countdown ends sooner, so a pair-mode override happens when it is due
// rather than up to a probe interval later. A countdown that has ended
// without an override (refused: a peer answered) leaves the interval as
// it is, so a refusal does not probe in a tight loop.
func nextGuardTick(interval time.Duration, now, overrideAt time.Time) time.Duration {
	if d := overrideAt.Sub(now); !overrideAt.IsZero() && d > 0 && d+overrideTickMargin < interval {
		return d + overrideTickMargin
	}
	return interval
}

// overrideCountdown tells when the automatic override will happen if no
// other voter is heard from before then: ok once every other voter has
// been silent for overrideNoticeAfter and the override is otherwise
// possible. It is pure, like overrideDue.
func overrideCountdown(in overrideInput) (at time.Time, ok bool) {
	if in.mode != ModePair || in.recovering || in.isLeader || !in.selfVoter || len(in.otherVoters) == 0 {
		return time.Time{}, false
	}
	var last time.Time
	for _, id := range in.otherVoters {
		if t := in.lastContact(id); t.After(last) {
			last = t
		}
	}
	if in.now.Sub(last) < overrideNoticeAfter {
		return time.Time{}, false
	}
	return last.Add(in.after), true
}
