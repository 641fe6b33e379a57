package raftnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// guardLoop probes the peers and runs the pair-mode override, the epoch bump
// after an override and the re-admission of returning members.
func (n *Node) guardLoop() {
	defer n.wg.Done()
	timer := time.NewTimer(n.jitter(n.cfg.ProbeInterval))
	defer timer.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-timer.C:
		}
		overrideAt := n.guardTick(n.ctx)
		timer.Reset(nextGuardTick(n.jitter(n.cfg.ProbeInterval), n.cfg.Clock.Now(), overrideAt))
	}
}

// guardTick probes the peers and acts on what it finds; it returns when a
// pair-mode override will be due if no other voter is heard from first
// (zero: no countdown).
func (n *Node) guardTick(ctx context.Context) time.Time {
	if _, recovering := n.current(); recovering {
		return time.Time{}
	}
	answers := n.probePeers(ctx)
	r, recovering := n.current()
	if r == nil || recovering {
		return time.Time{}
	}
	// raft's own view of leader contact counts as contact with the leader.
	if _, leader := r.LeaderWithID(); leader != "" && string(leader) != n.cfg.NodeID {
		n.contact.touchAt(string(leader), r.LastContact())
	}
	if n.epochPending.Load() && r.State() == raft.Leader {
		n.bumpEpoch(ctx, r)
	}
	in := n.overrideInput(r)
	due, reason := overrideDue(in)
	at, counting := overrideCountdown(in)
	switch {
	case counting && !due && !n.overrideNoticed:
		n.overrideNoticed = true
		n.log.Warn().Strs("peers", in.otherVoters).Time("override_at", at).Dur("override_after", in.after).
			Msg("no contact with the peer: this node will become the sole voter and Active at override_at unless the peer is heard from first")
	case !counting && n.overrideNoticed:
		// The countdown ends with the override (due), or when this node
		// is the only voter anyway; only otherwise was the peer heard.
		n.overrideNoticed = false
		if !due && len(in.otherVoters) > 0 {
			n.log.Info().Msg("peer heard from again: no override")
		}
	}
	if due {
		// This countdown ends here: the next tick finds this node the sole
		// voter, which is not the peer being heard from.
		n.overrideNoticed = false
		n.log.Warn().Str("reason", reason).Msg("availability override due")
		if err := n.override(ctx, "automatic: "+reason, false); err != nil {
			n.log.Error().Err(err).Msg("availability override did not happen")
		}
		return time.Time{}
	}
	if r.State() == raft.Leader {
		n.removeLeaving(r, answers)
		n.readmit(ctx, r, answers)
	}
	if counting {
		return at
	}
	return time.Time{}
}

func (n *Node) overrideInput(r *raft.Raft) overrideInput {
	in := overrideInput{
		now:      n.cfg.Clock.Now(),
		mode:     n.cfg.Mode,
		after:    n.cfg.OverrideAfter,
		isLeader: r.State() == raft.Leader,
		lastContact: func(id string) time.Time {
			t, _ := n.contact.lastContact(id)
			return t
		},
	}
	for _, s := range r.GetConfiguration().Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		if string(s.ID) == n.cfg.NodeID {
			in.selfVoter = true
		} else {
			in.otherVoters = append(in.otherVoters, string(s.ID))
		}
	}
	return in
}

// probePeers probes every configured member but this node concurrently and
// returns the status of those that answered.
func (n *Node) probePeers(ctx context.Context) map[string]peerStatus {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		out = make(map[string]peerStatus)
	)
	for _, m := range n.cfg.Members {
		if m.ID == n.cfg.NodeID {
			continue
		}
		wg.Add(1)
		go func(m Member) {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, n.cfg.ProbeTimeout)
			defer cancel()
			st, err := n.stream.probe(pctx, m.RaftAddr)
			if err != nil {
				n.log.Debug().Err(err).Str("peer", m.ID).Msg("peer probe failed")
				return
			}
			mu.Lock()
			out[m.ID] = st
			mu.Unlock()
		}(m)
	}
	wg.Wait()
	now := n.cfg.Clock.Now()
	n.mu.Lock()
	prev := n.reachable
	n.reachable = out
	for _, m := range n.cfg.Members {
		_, was := prev[m.ID]
		_, is := out[m.ID]
		if _, known := n.reachableSince[m.ID]; (!known || was != is) && m.ID != n.cfg.NodeID {
			n.reachableSince[m.ID] = now
		}
	}
	n.mu.Unlock()
	for _, m := range n.cfg.Members {
		_, was := prev[m.ID]
		_, is := out[m.ID]
		switch {
		case m.ID == n.cfg.NodeID || was == is:
		case is:
			n.log.Info().Str("peer", m.ID).Str("addr", m.RaftAddr).Msg("peer answers probes")
		default:
			n.log.Warn().Str("peer", m.ID).Str("addr", m.RaftAddr).Msg("peer stopped answering probes")
		}
	}
	return out
}

// anyAnswers re-probes ids right before an override: the last line against
// islanding a node whose peer has just come back.
func (n *Node) anyAnswers(ctx context.Context, ids []string) (string, bool) {
	for _, id := range ids {
		addr := n.addrOf(id)
		if addr == "" {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, n.cfg.ProbeTimeout)
		_, err := n.stream.probe(pctx, addr)
		cancel()
		if err == nil {
			return id, true
		}
		if t, ok := n.contact.lastContact(id); ok && n.cfg.Clock.Now().Sub(t) < n.cfg.ProbeInterval+n.cfg.ProbeTimeout {
			return id, true
		}
	}
	return "", false
}

func (n *Node) addrOf(id string) string {
	if m, ok := n.cfg.member(id); ok {
		return m.RaftAddr
	}
	if r, _ := n.current(); r != nil {
		for _, s := range r.GetConfiguration().Configuration().Servers {
			if string(s.ID) == id {
				return string(s.Address)
			}
		}
	}
	return ""
}

// override re-forms the cluster with this node as its sole voter:
// shut raft down, RecoverCluster with a one-voter configuration, start raft
// on a fresh transport, wait for leadership and record the epoch bump.
// Unless force is set it refuses while any other voter answers.
func (n *Node) override(ctx context.Context, why string, force bool) error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	if n.ctx.Err() != nil {
		return ErrShutdown
	}
	r, _ := n.current()
	if r == nil {
		return ErrShutdown
	}
	var others []string
	for _, s := range r.GetConfiguration().Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != n.cfg.NodeID {
			others = append(others, string(s.ID))
		}
	}
	if len(others) == 0 {
		return errors.New("override: this node is already the sole voter")
	}
	if !force {
		if id, ok := n.anyAnswers(ctx, others); ok {
			return fmt.Errorf("override refused: %w: member %s answered", ErrPeerAnswering, id)
		}
	}
	n.log.Warn().Str("why", why).Strs("dropped_voters", sortedIDs(others)).Bool("forced", force).
		Msg("OVERRIDE: re-forming the cluster with this node as its sole voter")

	n.setRecovering(true)
	n.refreshRole()
	defer func() {
		n.setRecovering(false)
		n.wake()
	}()

	marker := filepath.Join(n.cfg.DataDir, overrideMarker)
	if err := os.WriteFile(marker, []byte(why+"\n"), 0o600); err != nil {
		return fmt.Errorf("override: write %s: %w", marker, err)
	}
	n.epochPending.Store(true)
	if err := n.stopRaft(); err != nil {
		n.log.Error().Err(err).Msg("override: raft shutdown reported an error; recovering anyway")
	}
	recErr := n.recoverAlone()
	if recErr != nil {
		n.log.Error().Err(recErr).Msg("override: recovery failed; restarting raft on the old configuration")
	}
	// The sole voter elects itself once its heartbeat timeout passes
	// (500-1000 ms by default): a window in which a healed peer finds a
	// node that decided to override while it was away and has not
	// finished. Wait the shortest raft allows (the leader lease), then
	// go back to the configured timeout below.
	rc := n.cfg.raftConfig(n.hlog)
	if recErr == nil {
		rc.HeartbeatTimeout = min(rc.HeartbeatTimeout, rc.LeaderLeaseTimeout)
	}
	if err := n.startRaftWith(rc); err != nil {
		return errors.Join(recErr, fmt.Errorf("override: restart raft: %w", err))
	}
	if recErr != nil {
		_ = os.Remove(marker)
		n.epochPending.Store(false)
		return recErr
	}
	// Silence measured before the override must not count against a peer
	// that shows up after it.
	n.contact.restartWindow()
	n.setRecovering(false)

	r, _ = n.current()
	err := n.waitLeader(ctx, r)
	n.restoreTimeouts(r)
	if err != nil {
		return fmt.Errorf("override: %w", err)
	}
	n.bumpEpoch(ctx, r)
	return nil
}

// restoreTimeouts gives r the configured timeouts again after an override
// started it with a short heartbeat timeout.
func (n *Node) restoreTimeouts(r *raft.Raft) {
	rc := n.cfg.raftConfig(n.hlog)
	err := r.ReloadConfig(raft.ReloadableConfig{
		TrailingLogs: rc.TrailingLogs, SnapshotInterval: rc.SnapshotInterval, SnapshotThreshold: rc.SnapshotThreshold,
		HeartbeatTimeout: rc.HeartbeatTimeout, ElectionTimeout: rc.ElectionTimeout,
	})
	if err != nil {
		n.log.Error().Err(err).Dur("heartbeat_timeout", rc.HeartbeatTimeout).Msg("override: cannot restore the configured raft timeouts")
	}
}

func (n *Node) recoverAlone() error {
	skip := false
	if n.cfg.AppliedIndex != nil {
		metas, err := n.snaps.List()
		if err != nil {
			return fmt.Errorf("override: list snapshots: %w", err)
		}
		skip = len(metas) == 0 || n.cfg.AppliedIndex() >= metas[0].Index
	}
	only := raft.Configuration{Servers: []raft.Server{{
		Suffrage: raft.Voter, ID: raft.ServerID(n.cfg.NodeID), Address: raft.ServerAddress(n.cfg.AdvertiseAddr),
	}}}
	// The transport is only used to encode peers into the snapshot meta.
	trans := n.newTransport()
	defer trans.Close()
	if err := raft.RecoverCluster(n.cfg.raftConfig(n.hlog), recoveryFSM{FSM: n.cfg.FSM, skipRestore: skip},
		n.logs, n.stable, n.snaps, trans, only); err != nil {
		return fmt.Errorf("override: recover cluster with %s as sole voter: %w", n.cfg.NodeID, err)
	}
	return nil
}

func (n *Node) waitLeader(ctx context.Context, r *raft.Raft) error {
	deadline := time.NewTimer(20*n.cfg.ElectionTimeout + 5*time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for r.State() != raft.Leader {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for leadership: %w", ctx.Err())
		case <-deadline.C:
			return errors.New("wait for leadership: timed out")
		case <-tick.C:
		}
	}
	return nil
}

// bumpEpoch records the override through the wirer's callback. Until it
// succeeds the node stays Detached; the guard loop retries it.
func (n *Node) bumpEpoch(ctx context.Context, r *raft.Raft) {
	if !n.epochPending.Load() {
		return
	}
	next := nextEpoch(n.cfg.FSM.ClusterEpoch(), n.cfg.Members, n.cfg.NodeID)
	if n.cfg.OnOverride == nil {
		n.log.Error().Uint64("epoch", next).Msg("override: no OnOverride callback; the cluster epoch is NOT bumped")
	} else {
		cctx, cancel := context.WithTimeout(ctx, 10*n.cfg.ElectionTimeout+5*time.Second)
		err := n.cfg.OnOverride(cctx, next)
		cancel()
		if err != nil {
			n.log.Error().Err(err).Uint64("epoch", next).Msg("override: epoch bump failed; staying Detached and retrying")
			return
		}
	}
	if err := os.Remove(filepath.Join(n.cfg.DataDir, overrideMarker)); err != nil && !errors.Is(err, os.ErrNotExist) {
		n.log.Error().Err(err).Msg("override: remove marker")
	}
	n.epochPending.Store(false)
	n.log.Warn().Uint64("cluster_epoch", n.cfg.FSM.ClusterEpoch()).Uint64("term", r.CurrentTerm()).Msg("override complete: this node is the sole voter")
	n.wake()
}

// readmit adds back, as voters, configured members missing from the
// configuration that answer probes and whose own configuration still names
// this node (a returning or freshly bootstrapped peer). A peer that leads a
// configuration without us formed its own cluster: re-adding it would merge
// two diverged histories, so it is reported instead.
func (n *Node) readmit(ctx context.Context, r *raft.Raft, answers map[string]peerStatus) {
	servers := r.GetConfiguration().Configuration().Servers
	for _, m := range n.cfg.Members {
		if m.ID == n.cfg.NodeID || slices.ContainsFunc(servers, func(s raft.Server) bool { return string(s.ID) == m.ID }) {
			n.clearSplitBrain(m.ID)
			continue
		}
		st, ok := answers[m.ID]
		if !ok {
			continue
		}
		n.mu.RLock()
		removed := n.removed[m.ID]
		n.mu.RUnlock()
		if removed {
			continue
		}
		if len(st.Voters) == 0 {
			// Its raft is down or re-forming (its own override, say): adding
			// it now could fold a history of its own into ours. Next probe.
			continue
		}
		if !slices.Contains(st.Voters, n.cfg.NodeID) {
			n.mu.Lock()
			_, known := n.splitBrain[m.ID]
			n.splitBrain[m.ID] = st
			n.mu.Unlock()
			if !known {
				n.log.Error().Str("peer", m.ID).Str("peer_state", st.State).Uint64("peer_epoch", st.Epoch).Strs("peer_voters", st.Voters).
					Msg("DUAL-ACTIVE: peer runs a cluster without this node; not re-adding it (heal needed)")
			}
			continue
		}
		n.log.Info().Str("peer", m.ID).Str("addr", m.RaftAddr).Msg("configured member is back; adding it as a voter")
		if err := r.AddVoter(raft.ServerID(m.ID), raft.ServerAddress(m.RaftAddr), 0, 10*n.cfg.ElectionTimeout+5*time.Second).Error(); err != nil {
			n.log.Warn().Err(err).Str("peer", m.ID).Msg("re-adding member failed; will retry")
		} else {
			n.clearSplitBrain(m.ID)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

func (n *Node) clearSplitBrain(id string) {
	n.mu.Lock()
	delete(n.splitBrain, id)
	n.mu.Unlock()
}

// nextEpoch is the cluster epoch an override by self records after current.
// Two sides of a split pair override from the same epoch; if both took
// current+1 their deliveries and gateway writes would carry the same fencing
// epoch and no receiver could tell them apart. So the epochs a node can take
// are its own residue class: the smallest number above current that is
// congruent to self's position among the sorted member ids.
func nextEpoch(current uint64, members []Member, self string) uint64 {
	ids := make([]string, 0, len(members))
	for _, m := range members {
		ids = append(ids, m.ID)
	}
	sort.Strings(ids)
	stride := uint64(max(len(ids), 1))
	slot := uint64(0)
	for i, id := range ids {
		if id == self {
			slot = uint64(i)
		}
	}
	next := (current/stride)*stride + slot
	for next <= current {
		next += stride
	}
	return next
}
