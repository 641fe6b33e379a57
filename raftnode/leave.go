package raftnode

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// leavingState is what a node that is leaving the voters answers to
// probes: no voter list, so the peer neither re-adds it (readmit skips an
// answer without voters) nor mistakes it for a cluster of its own.
const leavingState = "Leaving"

// LeaveVoters is a planned stop's first step in pair mode: two voters
// lose quorum when one of them stops, which would leave the other without
// an Active node until OverrideAfter. The Active hands leadership to its
// peer and says in its probe answers that it is leaving; the new leader
// then removes it from the configuration and carries on at once as sole
// voter. LeaveVoters returns once this node is out of the configuration
// (or ctx ends). Started again, the node answers probes with its last
// configuration, which names the survivor, and is re-admitted as Standby.
// A Standby leaves the same way, without the hand-over. Outside pair
// mode, or on a node that is not one of exactly two voters with its peer
// leading or answering, it does nothing and returns nil.
func (n *Node) LeaveVoters(ctx context.Context) error {
	if n.cfg.Mode != ModePair {
		return nil
	}
	r, recovering := n.current()
	if r == nil || recovering {
		return nil
	}
	var peer raft.Server
	voters, self := 0, false
	for _, s := range r.GetConfiguration().Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		if string(s.ID) == n.cfg.NodeID {
			self = true
		} else {
			peer = s
		}
	}
	if voters != 2 || !self {
		return nil
	}
	leader := r.State() == raft.Leader
	if _, id := r.LeaderWithID(); !leader && string(id) != string(peer.ID) {
		return nil // no leader known: nobody to remove this node
	}
	if last, ok := n.contact.lastContact(string(peer.ID)); !ok || n.cfg.Clock.Now().Sub(last) > 2*n.cfg.HeartbeatTimeout {
		return fmt.Errorf("leave the voters: peer %s not heard from lately; stopping without a hand-over", peer.ID)
	}
	n.leaving.Store(true)
	n.wake()
	n.log.Info().Str("peer", string(peer.ID)).Bool("leader", leader).
		Msg("planned stop in pair mode: leaving the voters (handing leadership over first when leading), so the peer carries on as sole voter")
	if leader {
		if err := r.LeadershipTransferToServer(peer.ID, peer.Address).Error(); err != nil {
			return fmt.Errorf("leave the voters: hand leadership to %s: %w", peer.ID, err)
		}
	}
	for {
		if !slices.ContainsFunc(r.GetConfiguration().Configuration().Servers, func(s raft.Server) bool { return string(s.ID) == n.cfg.NodeID }) {
			n.log.Info().Str("sole_voter", string(peer.ID)).Msg("left the voters")
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("leave the voters: %s did not remove this node: %w", peer.ID, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// removeLeaving is the leader's side of LeaveVoters: a voter whose probe
// answer says it is leaving is removed from the configuration (not marked
// as removed by an operator: it is re-admitted when it comes back).
func (n *Node) removeLeaving(r *raft.Raft, answers map[string]peerStatus) {
	if n.cfg.Mode != ModePair {
		return
	}
	for _, s := range r.GetConfiguration().Configuration().Servers {
		st, ok := answers[string(s.ID)]
		if !ok || st.State != leavingState || string(s.ID) == n.cfg.NodeID {
			continue
		}
		n.log.Info().Str("peer", string(s.ID)).Msg("peer is leaving the voters for a planned stop; removing it, carrying on as sole voter")
		if err := r.RemoveServer(s.ID, 0, 5*time.Second).Error(); err != nil {
			n.log.Warn().Err(err).Str("peer", string(s.ID)).Msg("removing the leaving peer failed; will retry")
		}
	}
}
