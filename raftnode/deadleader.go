package raftnode

import (
	"time"

	"github.com/hashicorp/raft"
)

// raft's follower checks its leader's last contact only when its heartbeat
// timer fires, and re-arms the timer (a random HeartbeatTimeout to twice
// that) only then, not on each heartbeat: a leader that dies just after a
// check is noticed up to three heartbeat timeouts after its last word. The
// dead-leader watch checks the last contact every half heartbeat interval
// (raft's leader heartbeats every tenth of the heartbeat timeout), and
// again at the instant that contact turns a heartbeat timeout old (a
// check interval later would add half an interval to every failover on
// average). Once it is that old, the watch makes raft stand for election
// at once through its public API: ReloadConfig with a heartbeat timeout below
// the current one fires the follower's timer now, and the contact it then
// checks is older than the lowered timeout. The configured timeout is
// given back as soon as the node has left the follower state (or heard
// from a leader again).
//
// Where two voters could survive a leader (three or more voters besides a
// witness), the threshold is the heartbeat timeout plus a jitter of up to a
// fifth of it, drawn afresh after each contact, so they do not stand at the
// same instant and split the vote. With two voters and a witness the lone
// surviving voter stands at the timeout itself: the witness (half the
// timeout) has stood before it, failed its pre-vote, and grants the vote.

// deadLeaderAction is what the watch does on one check.
type deadLeaderAction int

const (
	watchIdle    deadLeaderAction = iota
	watchNudge                    // lower the heartbeat timeout: stand now
	watchRestore                  // give the configured timeout back
)

// deadLeaderWatch decides, one check at a time, whether a follower's
// leader is dead. It holds no raft handle, so it is tested on its own.
type deadLeaderWatch struct {
	timeout time.Duration  // the node's heartbeat timeout
	rand    func() float64 // [0,1); nil: no jitter
	// lastSeen is the contact the threshold was drawn for.
	lastSeen  time.Time
	threshold time.Duration
	nudged    bool
}

func (w *deadLeaderWatch) check(state raft.RaftState, lastContact, now time.Time) deadLeaderAction {
	if w.nudged {
		if state != raft.Follower || !lastContact.Equal(w.lastSeen) {
			w.nudged = false
			return watchRestore
		}
		return watchIdle
	}
	if state != raft.Follower || lastContact.IsZero() {
		return watchIdle
	}
	if !lastContact.Equal(w.lastSeen) || w.threshold == 0 {
		w.lastSeen = lastContact
		w.threshold = w.timeout
		if w.rand != nil {
			w.threshold += time.Duration(w.rand() * float64(w.timeout) / 5)
		}
	}
	if now.Sub(lastContact) < w.threshold {
		return watchIdle
	}
	w.nudged = true
	return watchNudge
}

// nextCheck is how long the loop may wait before its next check: the
// check interval, or less when the threshold for the contact last checked
// passes sooner, so the nudge comes at the threshold rather than up to an
// interval after it. A threshold already past was acted on, or the node is
// no follower (a leader, a candidate): the interval then, never zero, or
// the loop would spin.
func (w *deadLeaderWatch) nextCheck(interval time.Duration, now time.Time) time.Duration {
	if w.nudged || w.lastSeen.IsZero() || w.threshold == 0 {
		return interval
	}
	due := w.lastSeen.Add(w.threshold).Sub(now)
	if due <= 0 || due >= interval {
		return interval
	}
	return due
}

// deadLeaderLoop runs the watch against the current raft instance.
func (n *Node) deadLeaderLoop() {
	defer n.wg.Done()
	rc := n.cfg.raftConfig(n.hlog)
	// The lowered timeout must stay at or above the lease (raft refuses a
	// config with a longer lease) and below the configured timeout (raft
	// fires the follower's timer only when it shrinks).
	lowered := rc.LeaderLeaseTimeout
	if lowered >= rc.HeartbeatTimeout {
		n.log.Warn().Dur("heartbeat_timeout", rc.HeartbeatTimeout).Dur("leader_lease_timeout", rc.LeaderLeaseTimeout).
			Msg("the leader lease equals the heartbeat timeout: a dead leader is noticed by raft's own timer alone (up to three heartbeat timeouts)")
		return
	}
	interval := max(rc.HeartbeatTimeout/20, time.Millisecond)
	tick := time.NewTimer(interval)
	defer tick.Stop()
	var jitter func() float64
	voters := 0
	for _, m := range n.cfg.Members {
		if !m.Witness {
			voters++
		}
	}
	if voters >= 3 {
		jitter = n.cfg.Rand
	}
	w := &deadLeaderWatch{timeout: rc.HeartbeatTimeout, rand: jitter}
	var watched *raft.Raft
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		r, recovering := n.current()
		if r == nil || recovering {
			tick.Reset(interval)
			continue
		}
		if r != watched {
			// A new instance (after an override) starts with the config.
			watched = r
			w = &deadLeaderWatch{timeout: rc.HeartbeatTimeout, rand: jitter}
		}
		switch w.check(r.State(), r.LastContact(), time.Now()) {
		case watchNudge:
			n.log.Info().Dur("since_contact", time.Since(r.LastContact()).Round(time.Millisecond)).
				Msg("no word from the leader for a heartbeat timeout: standing for election now")
			n.setHeartbeatTimeout(r, lowered)
		case watchRestore:
			n.setHeartbeatTimeout(r, rc.HeartbeatTimeout)
		}
		tick.Reset(w.nextCheck(interval, time.Now()))
	}
}

func (n *Node) setHeartbeatTimeout(r *raft.Raft, d time.Duration) {
	cur := r.ReloadableConfig()
	cur.HeartbeatTimeout = d
	if err := r.ReloadConfig(cur); err != nil {
		n.log.Error().Err(err).Dur("heartbeat_timeout", d).Msg("dead-leader watch: cannot set raft's heartbeat timeout")
	}
}
