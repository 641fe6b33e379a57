package raftnode

import (
	"errors"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/scadad/scadad/role"
)

// roleLoop re-evaluates the role on every raft observation (leader change,
// state change, peer change, heartbeat failure) and every RoleInterval.
func (n *Node) roleLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(n.cfg.RoleInterval)
	defer tick.Stop()
	var stand witnessStand
	for {
		select {
		case <-n.ctx.Done():
			return
		case o := <-n.obsCh:
			if req, ok := o.Data.(raft.RequestPreVoteRequest); ok {
				n.onPreVote(&stand, req)
			}
		case <-tick.C:
		}
		n.refreshRole()
		n.settleStand(&stand)
	}
}

// wake asks the role loop for an immediate re-evaluation.
func (n *Node) wake() {
	select {
	case n.obsCh <- raft.Observation{}:
	default:
	}
}

func (n *Node) refreshRole() {
	r, recovering := n.current()
	prev := n.bc.Current()
	st := n.computeState(r, recovering, prev)
	switch {
	case st.Role == role.Active:
		// Its own transfer (scadactl failover) picks by contact alone.
		n.followedLeader.Store(nil)
	case st.Leader != "" && st.Leader != n.cfg.NodeID:
		if l := n.followedLeader.Load(); l == nil || *l != st.Leader {
			n.followedLeader.Store(&st.Leader)
		}
	}
	if prev != st {
		n.pubMu.Lock()
		if n.ctx.Err() != nil {
			n.pubMu.Unlock()
			return // shutting down: Shutdown published Detached
		}
		n.bc.Publish(st)
		n.pubMu.Unlock()
		lvl := n.log.Debug()
		if prev.Role != st.Role || prev.Leader != st.Leader {
			lvl = n.log.Info()
		}
		lvl.Stringer("role", st.Role).Stringer("was", prev.Role).Str("leader", st.Leader).
			Stringer("epoch", st.Epoch).Int("voters", st.Voters).Msg("role changed")
	}
	if r == nil || recovering || r.State() != raft.Leader {
		return
	}
	if n.cfg.isWitness() || n.cfg.applyBlocked() {
		n.startHandoff(r)
		return
	}
	if term := r.CurrentTerm(); n.barrierTerm.Load() != term {
		n.startBarrier(r, term)
	}
}

// computeState derives the published role from raft's view. While raft
// is down for an override the node is Detached but keeps the last epoch and
// voter count it knew: epochs seen by consumers never go backwards.
func (n *Node) computeState(r *raft.Raft, recovering bool, prev role.State) role.State {
	st := role.State{Role: role.Detached, NodeID: n.cfg.NodeID, Epoch: role.Epoch{Cluster: n.cfg.FSM.ClusterEpoch()}}
	if r == nil || recovering {
		st.Epoch.Term = prev.Epoch.Term
		st.Voters = prev.Voters
		return st
	}
	term := r.CurrentTerm()
	st.Epoch.Term = term
	selfVoter := false
	for _, s := range r.GetConfiguration().Configuration().Servers {
		if s.Suffrage == raft.Voter {
			st.Voters++
			if string(s.ID) == n.cfg.NodeID {
				selfVoter = true
			}
		}
	}
	_, leader := r.LeaderWithID()
	st.Leader = string(leader)
	if !selfVoter || n.cfg.applyBlocked() || n.leaving.Load() {
		return st
	}
	switch r.State() {
	case raft.Leader:
		// A witness leader is handing off; a leader whose barrier has not
		// yet committed may still be applying its predecessor's entries; an
		// overridden leader is Active only once its epoch bump is committed.
		if n.cfg.isWitness() || n.epochPending.Load() || n.barrierTerm.Load() != term {
			st.Electing = true
			return st
		}
		st.Role = role.Active
	case raft.Candidate:
		st.Electing = true
	case raft.Follower:
		if leader == "" || time.Since(r.LastContact()) > 2*n.cfg.HeartbeatTimeout {
			st.Electing = true
			return st
		}
		if n.cfg.isWitness() {
			st.Role = role.Witness
		} else {
			st.Role = role.Standby
		}
	}
	return st
}

// startBarrier waits, once per term, for the new leader's FSM to apply
// everything committed before it: side effects must not run on state older
// than the log.
func (n *Node) startBarrier(r *raft.Raft, term uint64) {
	if !n.barrierBusy.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer n.barrierBusy.Store(false)
		err := r.Barrier(10 * n.cfg.ElectionTimeout).Error()
		if err != nil {
			n.log.Warn().Err(err).Uint64("term", term).Msg("leader barrier failed; not Active yet")
			return
		}
		if r.CurrentTerm() == term && r.State() == raft.Leader {
			n.barrierTerm.Store(term)
			n.wake()
		}
	}()
}

// startHandoff makes a witness that won an election give leadership away,
// retrying until it is a follower again. It names the target itself, the
// voter heard from most recently: raft's own pick goes by replication index
// and can choose a dead voter, which costs a whole transfer timeout.
func (n *Node) startHandoff(r *raft.Raft) {
	if !n.handoffBusy.CompareAndSwap(false, true) {
		return
	}
	since := n.appends.mark()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.handoffBusy.Store(false)
		n.awaitAppendOutcomes(r, since)
		// Attempts come a few times a second while no voter can take over
		// (one down, the other behind): the first failure is logged, then
		// one every repeatEvery with how many went unlogged.
		failures := newRepeats(n.cfg.Clock.Now)
		for attempt := 0; r.State() == raft.Leader && n.ctx.Err() == nil; attempt++ {
			targets := n.handoffTargets(r)
			if len(targets) == 0 {
				n.log.Error().Msg("witness leads but the configuration has no other voter to hand leadership to")
				return
			}
			target := targets[attempt%len(targets)]
			ev := n.log.Debug()
			if attempt == 0 {
				ev = n.log.Info()
			}
			why := "witness won an election; transferring leadership to a voter"
			if !n.cfg.isWitness() {
				why = "this node's FSM stopped applying (an entry needs a newer feature level); transferring leadership to a voter"
			}
			ev.Int("attempt", attempt+1).Str("to", string(target.ID)).Msg(why)
			err := r.LeadershipTransferToServer(target.ID, target.Address).Error()
			if err == nil {
				continue
			}
			if errors.Is(err, raft.ErrRaftShutdown) || errors.Is(err, raft.ErrNotLeader) {
				return
			}
			if ok, unlogged := failures.admit("handoff"); ok {
				n.log.Warn().Err(err).Int("attempt", attempt+1).Int("unlogged_failures", unlogged).Str("to", string(target.ID)).
					Msg("witness leadership transfer failed; retrying")
			}
			select {
			case <-n.ctx.Done():
				return
			case <-time.After(n.jitter(n.cfg.HeartbeatTimeout / 5)):
			}
		}
	}()
}

// awaitAppendOutcomes waits, at most half a heartbeat timeout, until the
// hand-off targets' answers to an append sent after since (a new leader
// appends a no-op at once) say enough for the first pick (see
// knowWhoStores).
func (n *Node) awaitAppendOutcomes(r *raft.Raft, since uint64) {
	deadline := time.After(n.cfg.HeartbeatTimeout / 2)
	for {
		var ids []string
		for _, s := range n.handoffTargets(r) {
			ids = append(ids, string(s.ID))
		}
		if n.appends.knowWhoStores(ids, since) {
			return
		}
		select {
		case <-deadline:
			return
		case <-n.ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// handoffTargets lists the voters a witness may hand leadership to: only
// those storing what they are sent while any does (see appendOutcomes),
// else all. Those heard from within a heartbeat timeout come first, and
// among them any but the leader this node followed before it won: that
// leader lost an election it would have won had it been well (it stalled,
// or fenced itself and was rebuilt), and the witness, having followed it,
// heard from it last, so recency alone handed the Active role straight
// back to it. The rest follow, most recently heard from first.
func (n *Node) handoffTargets(r *raft.Raft) []raft.Server {
	var storing, refusing []raft.Server
	for _, s := range r.GetConfiguration().Configuration().Servers {
		if s.Suffrage != raft.Voter || string(s.ID) == n.cfg.NodeID {
			continue
		}
		if m, ok := n.cfg.member(string(s.ID)); ok && m.Witness {
			continue
		}
		if n.appends.refusing(string(s.ID)) {
			refusing = append(refusing, s)
		} else {
			storing = append(storing, s)
		}
	}
	out := storing
	if len(out) == 0 {
		out = refusing
	}
	now := n.cfg.Clock.Now()
	var lost string
	if l := n.followedLeader.Load(); l != nil {
		lost = *l
	}
	preferred := func(s raft.Server) bool {
		t, _ := n.contact.lastContact(string(s.ID))
		return now.Sub(t) <= n.cfg.HeartbeatTimeout && string(s.ID) != lost
	}
	slices.SortStableFunc(out, func(a, b raft.Server) int {
		if pa, pb := preferred(a), preferred(b); pa != pb {
			if pa {
				return -1
			}
			return 1
		}
		ta, _ := n.contact.lastContact(string(a.ID))
		tb, _ := n.contact.lastContact(string(b.ID))
		return tb.Compare(ta)
	})
	return out
}

// jitter returns d scaled by a factor in [0.75, 1.25).
func (n *Node) jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.75 + n.cfg.Rand()/2))
}
