package raftnode

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/role"
)

// verifyInterval is how often a leader proves its leadership with a quorum
// round trip (raft's VerifyLeader: a heartbeat answered by a majority).
const verifyInterval = 50 * time.Millisecond

// lateConfirmationWarn is how long a leader goes without a quorum
// confirmation before verifyLoop says so.
const lateConfirmationWarn = 2 * time.Second

// verifyLoop keeps leaderVerifiedAt current while this node leads. A leader
// that was frozen (SIGSTOP, a VM stall) wakes up still believing it leads
// until raft notices the newer term; its last verification then is as old
// as the freeze, which is what ActiveFresh looks at.
func (n *Node) verifyLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(verifyInterval)
	defer tick.Stop()
	late := lateConfirmation{lastOK: &n.leadingUnconfirmedSince}
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		r, _ := n.current()
		if r == nil || r.State() != raft.Leader {
			late.notLeading()
			continue
		}
		started := n.cfg.Clock.Now()
		late.leading(started)
		done := make(chan error, 1)
		go func() { done <- r.VerifyLeader().Error() }()
		select {
		case err := <-done:
			if err == nil {
				// Leadership held at some instant after started: started is
				// the conservative stamp.
				n.stampVerified(started)
				late.confirmed(started, n.log)
			}
		case <-time.After(time.Second):
			// No quorum answered: leave the stamp to age.
		case <-n.ctx.Done():
			return
		}
		late.check(n.cfg.Clock.Now(), n.log, r)
	}
}

// lateConfirmation is verifyLoop's account of one leadership: when a
// quorum last confirmed it, and whether the lack of one has been logged.
type lateConfirmation struct {
	// lastOK is the last confirmation begun, or when the leadership was
	// first seen (unix nanoseconds; 0 when not leading). It is the Node's
	// leadingUnconfirmedSince, which Stats reads.
	lastOK *atomic.Int64
	warned bool
}

func (l *lateConfirmation) notLeading() {
	l.lastOK.Store(0)
	l.warned = false
}

func (l *lateConfirmation) leading(now time.Time) {
	l.lastOK.CompareAndSwap(0, now.UnixNano())
}

func (l *lateConfirmation) since() time.Time { return time.Unix(0, l.lastOK.Load()) }

func (l *lateConfirmation) confirmed(started time.Time, log zerolog.Logger) {
	if l.warned {
		log.Info().Dur("late_for", started.Sub(l.since()).Round(time.Millisecond)).
			Msg("leadership confirmed by a quorum again; the Active acts again")
	}
	l.lastOK.Store(started.UnixNano())
	l.warned = false
}

// check says once per late spell, past lateConfirmationWarn, that the
// leader acts on nothing and what raft is waiting for.
func (l *lateConfirmation) check(now time.Time, log zerolog.Logger, r *raft.Raft) {
	if l.warned || now.Sub(l.since()) <= lateConfirmationWarn {
		return
	}
	l.warned = true
	stats := r.Stats()
	log.Warn().Dur("unconfirmed_for", now.Sub(l.since()).Round(time.Millisecond)).
		Str("fsm_pending", stats["fsm_pending"]).Str("commit_index", stats["commit_index"]).Str("applied_index", stats["applied_index"]).
		Msg("leadership not confirmed by a quorum: deliveries, device writes and alarm records wait until it is. fsm_pending at 128 means the state machine is not keeping up (raft's leader loop waits for it); otherwise the other nodes are slow to answer")
}

// ActiveFresh reports whether this node is the leader and a quorum
// confirmed it within window. Side effects that must never run on two nodes
// at once (deliveries, device writes, "I am Active" answers) check it at
// the moment they act, so a leader that just woke from a freeze acts on
// nothing until it has heard from a quorum again — by then it has learnt of
// any newer term and stepped down.
func (n *Node) ActiveFresh(window time.Duration) bool {
	r, _ := n.current()
	if r == nil || r.State() != raft.Leader {
		return false
	}
	at := n.leaderVerifiedAt.Load()
	return at != 0 && n.cfg.Clock.Now().Sub(time.Unix(0, at)) <= window
}

// stampVerified records a quorum confirmation begun at started, never
// moving the stamp back (a confirmation begun before a freeze can end
// after a newer one).
func (n *Node) stampVerified(started time.Time) {
	for {
		old := n.leaderVerifiedAt.Load()
		if started.UnixNano() <= old || n.leaderVerifiedAt.CompareAndSwap(old, started.UnixNano()) {
			return
		}
	}
}

// ConfirmActive is ActiveFresh that, when the last confirmation is older
// than window but raft still says this node leads, confirms afresh (one
// quorum round trip, until ctx ends) instead of answering no: a leader
// that ran on after a short freeze answers yes as soon as a quorum has
// heard from it, not only after the next periodic confirmation. Yes is
// still only ever said on a confirmation begun within window.
func (n *Node) ConfirmActive(ctx context.Context, window time.Duration) bool {
	if n.ActiveFresh(window) {
		return true
	}
	r, _ := n.current()
	if r == nil || r.State() != raft.Leader {
		return false
	}
	started := n.cfg.Clock.Now()
	done := make(chan error, 1)
	go func() { done <- r.VerifyLeader().Error() }()
	select {
	case err := <-done:
		if err != nil {
			return false
		}
		n.stampVerified(started)
		return n.ActiveFresh(window)
	case <-ctx.Done():
		return false
	}
}

// Acting is the role stream as side effects must see it: the Active role
// counts only while a quorum confirmed the leadership within window
// (ActiveFresh). A leader that wakes from a freeze still believes it leads
// until raft hears of the newer term; through this view it delivers
// nothing, accepts no device write and does not answer /health/active
// with 200 in that gap. Watch passes the stream on as it is: a watcher
// reads Current when it acts.
func (n *Node) Acting(window time.Duration) role.Source {
	return actingRoles{Source: n.Role(), node: n, window: window}
}

type actingRoles struct {
	role.Source
	node   *Node
	window time.Duration
}

// CurrentConfirmed is Current with the Active role confirmed afresh when
// its last confirmation is stale (ConfirmActive), waiting until ctx ends.
func (a actingRoles) CurrentConfirmed(ctx context.Context) role.State {
	st := a.Source.Current()
	if st.Role == role.Active && !a.node.ConfirmActive(ctx, a.window) {
		st.Role, st.Unconfirmed = role.Detached, true
	}
	return st
}

func (a actingRoles) Current() role.State {
	st := a.Source.Current()
	if st.Role == role.Active && !a.node.ActiveFresh(a.window) {
		st.Role, st.Unconfirmed = role.Detached, true
	}
	return st
}
