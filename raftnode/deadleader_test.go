package raftnode

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestDeadLeaderWatchNudgesOnceAHeartbeatTimeoutPasses(t *testing.T) {
	w := &deadLeaderWatch{timeout: time.Second, rand: func() float64 { return 0.5 }} // threshold 1.1 s
	t0 := time.Unix(1000, 0)
	steps := []struct {
		state raft.RaftState
		last  time.Time
		now   time.Duration // after t0
		want  deadLeaderAction
	}{
		{raft.Follower, time.Time{}, 0, watchIdle}, // never heard from a leader
		{raft.Follower, t0, 500 * time.Millisecond, watchIdle},
		{raft.Follower, t0, 1050 * time.Millisecond, watchIdle}, // inside the jitter
		{raft.Follower, t0, 1100 * time.Millisecond, watchNudge},
		{raft.Follower, t0, 1200 * time.Millisecond, watchIdle},     // nudged once
		{raft.Candidate, t0, 1300 * time.Millisecond, watchRestore}, // raft stood
		{raft.Candidate, t0, 1400 * time.Millisecond, watchIdle},
		{raft.Follower, t0.Add(2 * time.Second), 2100 * time.Millisecond, watchIdle}, // a new leader
		{raft.Follower, t0.Add(2 * time.Second), 3150 * time.Millisecond, watchNudge},
		{raft.Follower, t0.Add(3200 * time.Millisecond), 3200 * time.Millisecond, watchRestore}, // it spoke again
		{raft.Leader, t0, 9 * time.Second, watchIdle},
	}
	for i, s := range steps {
		if got := w.check(s.state, s.last, t0.Add(s.now)); got != s.want {
			t.Fatalf("step %d (%v, contact %v, at +%s): %v, want %v", i, s.state, s.last.Sub(t0), s.now, got, s.want)
		}
	}
}

// A follower must stand for election about one heartbeat timeout after
// its leader's last word, not whenever raft's own timer (re-armed only when
// it fires, a random one to two timeouts) next looks: up to three timeouts.
func TestDeadLeaderNoticedAHeartbeatTimeoutAfterLastContact(t *testing.T) {
	t.Parallel()
	const hb = time.Second
	h := newHarness(t, ModeWitness, []string{"a", "b", "w"}, "w")
	h.tweak = func(c *Config) {
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = hb, hb, 250*time.Millisecond
	}
	for _, id := range []string{"a", "b", "w"} {
		h.start(id)
	}
	// Allowed: the timeout, one check interval (a twentieth; no jitter with
	// one surviving voter) and scheduling slack on a loaded machine. raft's
	// own timer stays under it in about a quarter of the trials.
	limit := hb + hb/20 + 250*time.Millisecond
	for trial := range 3 {
		old := h.waitOneActive(20 * time.Second)
		survivor := "a"
		if old == "a" {
			survivor = "b"
		}
		r := h.node(survivor).Raft()
		stood := make(chan time.Duration, 1)
		done := make(chan struct{})
		go func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if st := r.State(); st != raft.Follower {
					stood <- time.Since(r.LastContact())
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
		h.kill(old)
		var took time.Duration
		select {
		case took = <-stood:
		case <-time.After(10 * hb):
			close(done)
			t.Fatalf("trial %d: %s never stood for election after %s died", trial, survivor, old)
		}
		close(done)
		t.Logf("trial %d: %s stood %s after its last contact with %s", trial, survivor, took.Round(time.Millisecond), old)
		if took > limit {
			t.Fatalf("trial %d: %s stood %s after the leader's last contact, want at most %s (heartbeat timeout %s)", trial, survivor, took.Round(time.Millisecond), limit, hb)
		}
		h.waitOneActive(20 * time.Second)
		h.start(old)
	}
}

func TestDeadLeaderWatchWithoutJitterNudgesAtTheTimeout(t *testing.T) {
	w := &deadLeaderWatch{timeout: time.Second}
	t0 := time.Unix(1000, 0)
	if got := w.check(raft.Follower, t0, t0.Add(999*time.Millisecond)); got != watchIdle {
		t.Fatalf("before the timeout: %v", got)
	}
	if got := w.check(raft.Follower, t0, t0.Add(time.Second)); got != watchNudge {
		t.Fatalf("at the timeout: %v, want a nudge", got)
	}
}

// The loop must wake when the contact it last saw turns a timeout old,
// not at the next check interval: that lag was up to an interval on every
// failover.
func TestDeadLeaderWatchWakesAtTheThreshold(t *testing.T) {
	const interval = 20 * time.Millisecond
	w := &deadLeaderWatch{timeout: 400 * time.Millisecond}
	t0 := time.Unix(1000, 0)
	if got := w.nextCheck(interval, t0); got != interval {
		t.Fatalf("before any contact: wait %v, want the interval %v", got, interval)
	}
	w.check(raft.Follower, t0, t0.Add(100*time.Millisecond))
	if got := w.nextCheck(interval, t0.Add(100*time.Millisecond)); got != interval {
		t.Fatalf("300 ms before the threshold: wait %v, want the interval %v", got, interval)
	}
	w.check(raft.Follower, t0, t0.Add(393*time.Millisecond))
	if got := w.nextCheck(interval, t0.Add(393*time.Millisecond)); got != 7*time.Millisecond {
		t.Fatalf("7 ms before the threshold: wait %v, want 7ms", got)
	}
	if got := w.check(raft.Follower, t0, t0.Add(400*time.Millisecond)); got != watchNudge {
		t.Fatalf("at the threshold: %v, want a nudge", got)
	}
	if got := w.nextCheck(interval, t0.Add(400*time.Millisecond)); got != interval {
		t.Fatalf("after the nudge: wait %v, want the interval %v", got, interval)
	}
	// Once the node has stood and left the follower state (a candidate,
	// then the leader), the threshold of its last follower contact lies
	// in the past: the loop waits the interval, it must not spin.
	if got := w.check(raft.Candidate, t0, t0.Add(420*time.Millisecond)); got != watchRestore {
		t.Fatalf("a candidate after the nudge: %v, want the timeout given back", got)
	}
	for _, st := range []raft.RaftState{raft.Candidate, raft.Leader} {
		now := t0.Add(time.Second)
		if got := w.check(st, t0, now); got != watchIdle {
			t.Fatalf("%v: %v, want idle", st, got)
		}
		if got := w.nextCheck(interval, now); got != interval {
			t.Fatalf("%v, its follower threshold past: wait %v, want the interval %v", st, got, interval)
		}
	}
	// A newer contact moves the threshold.
	w = &deadLeaderWatch{timeout: 400 * time.Millisecond}
	w.check(raft.Follower, t0, t0.Add(390*time.Millisecond))
	w.check(raft.Follower, t0.Add(380*time.Millisecond), t0.Add(395*time.Millisecond))
	if got := w.nextCheck(interval, t0.Add(395*time.Millisecond)); got != interval {
		t.Fatalf("after a fresh contact: wait %v, want the interval %v", got, interval)
	}
}
