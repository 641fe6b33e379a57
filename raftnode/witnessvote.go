package raftnode

import (
	"time"

	"github.com/hashicorp/raft"
)

// A voter that stands for election while the witness holds entries it
// lacks cannot win: the witness refuses its pre-vote ("our last index is
// greater") and the dead leader cannot vote. Raft's witness, a candidate
// itself by then (its heartbeat timeout is the shorter), would stand again
// only when its own election timer fires, three election timeouts later
// (WitnessElectionTimeout): after a partition that is the common case, as
// the entries in flight at the cut reach the witness, the quicker follower
// to acknowledge. So the witness stands at once when it sees such a
// pre-vote: it wins (its log is the longest), brings the voter up to date
// and hands leadership over, as after any election it wins.
//
// It makes raft stand through its public API: a ReloadConfig that lowers
// the heartbeat timeout makes a candidate re-arm its election timer with
// the (also lowered) election timeout. The lowest raft takes is the lease
// (raft wants election >= heartbeat >= lease), which is why the witness's
// lease is short (Config.raftConfig): the witness stands one to two leases
// after the refusal. The timeouts stay lowered while it leads, so its
// heartbeats (a tenth of the heartbeat timeout) stay well inside that short
// lease while it hands off, and go back to the configured ones once it is
// a follower again, or after a few lowered rounds as a candidate.

// behind reports whether a log ending at (index, term) is behind one ending
// at (ourIndex, ourTerm): raft refuses such a candidate its vote.
func behind(index, term, ourIndex, ourTerm uint64) bool {
	return term < ourTerm || (term == ourTerm && index < ourIndex)
}

// witnessStand is the role loop's record of the timeouts it lowered.
type witnessStand struct {
	since   time.Time // when it stood after a refused pre-vote; zero: not standing
	lowered bool      // the lowered timeouts it set are in force
}

// standRounds is how many lowered election timeouts the witness may use
// before the configured timeouts come back even if it is still a
// candidate.
const standRounds = 4

// onPreVote is the role loop's answer to a pre-vote request this node
// received: on a witness that is a candidate, one from a voter whose log
// is behind its own makes it stand now.
func (n *Node) onPreVote(s *witnessStand, req raft.RequestPreVoteRequest) {
	if !n.cfg.isWitness() || !s.since.IsZero() || string(req.ID) == n.cfg.NodeID {
		return
	}
	r, recovering := n.current()
	if r == nil || recovering || r.State() != raft.Candidate {
		return
	}
	ourIndex, ourTerm, ok := n.lastEntry(r)
	if !ok || !behind(req.LastLogIndex, req.LastLogTerm, ourIndex, ourTerm) {
		return
	}
	rc := n.cfg.raftConfig(n.hlog)
	lowered := rc.LeaderLeaseTimeout
	cur := r.ReloadableConfig()
	if cur.HeartbeatTimeout != rc.HeartbeatTimeout || cur.ElectionTimeout != rc.ElectionTimeout || lowered >= rc.HeartbeatTimeout {
		// The dead-leader watch's lowered timeout is still in force (it
		// gives it back in a moment; the voter asks again), or there is
		// no lower timeout to set.
		return
	}
	cur.HeartbeatTimeout, cur.ElectionTimeout = lowered, lowered
	if err := r.ReloadConfig(cur); err != nil {
		n.log.Error().Err(err).Dur("election_timeout", lowered).Msg("witness: cannot lower raft's election timeout to stand now")
		return
	}
	s.since, s.lowered = n.cfg.Clock.Now(), true
	n.log.Info().Str("candidate", string(req.ID)).Uint64("candidate_last_index", req.LastLogIndex).
		Uint64("last_index", ourIndex).Dur("within", 2*lowered).
		Msg("a voter standing for election lacks entries this witness holds and cannot win; standing now to bring it up to date and hand leadership over")
}

// settleStand keeps raft's timeouts lowered while the witness stands (a
// candidate, for at most standRounds lowered election timeouts since the
// refused pre-vote) or leads, and gives the configured ones back
// otherwise. It touches only timeouts it set itself: the dead-leader
// watch lowers and restores the heartbeat timeout of a follower on its
// own.
func (n *Node) settleStand(s *witnessStand) {
	if !n.cfg.isWitness() {
		return
	}
	r, recovering := n.current()
	if r == nil || recovering {
		*s = witnessStand{} // a new instance starts with the configured timeouts
		return
	}
	rc := n.cfg.raftConfig(n.hlog)
	lowered := rc.LeaderLeaseTimeout
	state := r.State()
	standing := !s.since.IsZero() && state == raft.Candidate && n.cfg.Clock.Now().Sub(s.since) < standRounds*lowered
	if !standing {
		s.since = time.Time{}
	}
	want := standing || state == raft.Leader
	if want == s.lowered || lowered >= rc.HeartbeatTimeout {
		return
	}
	cur := r.ReloadableConfig()
	cur.HeartbeatTimeout, cur.ElectionTimeout = rc.HeartbeatTimeout, rc.ElectionTimeout
	if want {
		cur.HeartbeatTimeout, cur.ElectionTimeout = lowered, lowered
	}
	if err := r.ReloadConfig(cur); err != nil {
		n.log.Error().Err(err).Dur("heartbeat_timeout", cur.HeartbeatTimeout).Msg("witness: cannot set raft's timeouts")
		return
	}
	s.lowered = want
}

// lastEntry is the index and term of the last entry in this node's log
// (or its latest snapshot when the log holds nothing after it).
func (n *Node) lastEntry(r *raft.Raft) (index, term uint64, ok bool) {
	index = r.LastIndex()
	if index == 0 {
		return 0, 0, true
	}
	var l raft.Log
	if err := n.logs.GetLog(index, &l); err == nil {
		return index, l.Term, true
	}
	metas, err := n.snaps.List()
	if err != nil || len(metas) == 0 || metas[0].Index != index {
		return 0, 0, false
	}
	return index, metas[0].Term, true
}
