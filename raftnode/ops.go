package raftnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
)

var (
	// ErrNotLeader is wrapped by every refusal of a leader-only operation on
	// a follower; errors.As to *NotLeaderError tells where the leader is.
	ErrNotLeader = errors.New("not the leader")
	// ErrShutdown is returned once the node has been shut down.
	ErrShutdown = errors.New("raft node is shut down")
	// ErrPeerAnswering refuses a manual override while a peer still answers.
	ErrPeerAnswering = errors.New("a peer is still answering")
)

// NotLeaderError says who the leader is, when known, so callers can forward.
type NotLeaderError struct {
	LeaderID   string
	LeaderAddr string
}

func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" {
		return "not the leader (leader unknown)"
	}
	return fmt.Sprintf("not the leader (leader is %s at %s)", e.LeaderID, e.LeaderAddr)
}

// Is makes errors.Is(err, ErrNotLeader) hold.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }

// defaultOpTimeout bounds an operation whose context has no deadline.
const defaultOpTimeout = 30 * time.Second

func opTimeout(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d > 0 {
			return d
		}
		return time.Millisecond
	}
	return defaultOpTimeout
}

// wait waits for a raft future or the context, whichever ends first.
func wait(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (n *Node) notLeader(r *raft.Raft) error {
	addr, id := r.LeaderWithID()
	return &NotLeaderError{LeaderID: string(id), LeaderAddr: string(addr)}
}

// mapErr turns raft's leadership errors into NotLeaderError.
func (n *Node) mapErr(r *raft.Raft, what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
		return fmt.Errorf("%s: %w", what, n.notLeader(r))
	}
	if errors.Is(err, raft.ErrRaftShutdown) {
		return fmt.Errorf("%s: %w", what, ErrShutdown)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Apply commits cmd through raft and returns the FSM's response for it.
// Only the leader accepts commands; elsewhere it returns a *NotLeaderError.
func (n *Node) Apply(ctx context.Context, cmd []byte) (interface{}, error) {
	r, err := n.raftOrErr()
	if err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	if r.State() != raft.Leader {
		return nil, fmt.Errorf("apply: %w", n.notLeader(r))
	}
	f := r.Apply(cmd, opTimeout(ctx))
	if err := wait(ctx, f); err != nil {
		return nil, n.mapErr(r, "apply", err)
	}
	return f.Response(), nil
}

// Barrier waits until every entry committed before it is applied to the FSM.
func (n *Node) Barrier(ctx context.Context) error {
	r, err := n.raftOrErr()
	if err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	return n.mapErr(r, "barrier", wait(ctx, r.Barrier(opTimeout(ctx))))
}

// LeadershipTransfer hands leadership to the member called to or, when to
// is empty, to the other voter heard from most recently, never the witness.
func (n *Node) LeadershipTransfer(ctx context.Context, to string) error {
	r, err := n.raftOrErr()
	if err != nil {
		return fmt.Errorf("leadership transfer: %w", err)
	}
	if r.State() != raft.Leader {
		return fmt.Errorf("leadership transfer: %w", n.notLeader(r))
	}
	if to == "" {
		// raft's own pick goes by replication index alone and may choose
		// the witness, which hands leadership straight back: the Active
		// would not move. Take the voter heard from most recently.
		targets := n.handoffTargets(r)
		if len(targets) == 0 {
			return fmt.Errorf("leadership transfer: no other voter (the witness never keeps the Active role)")
		}
		to := targets[0]
		return n.mapErr(r, "leadership transfer to "+string(to.ID), wait(ctx, r.LeadershipTransferToServer(to.ID, to.Address)))
	}
	for _, s := range r.GetConfiguration().Configuration().Servers {
		if string(s.ID) != to {
			continue
		}
		if s.Suffrage != raft.Voter {
			return fmt.Errorf("leadership transfer to %s: not a voter", to)
		}
		if m, ok := n.cfg.member(to); ok && m.Witness {
			return fmt.Errorf("leadership transfer to %s: it is the witness and would hand leadership straight back", to)
		}
		return n.mapErr(r, "leadership transfer to "+to, wait(ctx, r.LeadershipTransferToServer(s.ID, s.Address)))
	}
	return fmt.Errorf("leadership transfer to %s: not in the cluster configuration", to)
}

// AddVoter adds (or re-adds) a voter. It also lifts an earlier operator
// removal of that member, so automatic re-admission applies to it again.
func (n *Node) AddVoter(ctx context.Context, id, addr string) error {
	r, err := n.raftOrErr()
	if err != nil {
		return fmt.Errorf("add voter %s: %w", id, err)
	}
	if r.State() != raft.Leader {
		return fmt.Errorf("add voter %s: %w", id, n.notLeader(r))
	}
	n.mu.Lock()
	delete(n.removed, id)
	n.mu.Unlock()
	return n.mapErr(r, "add voter "+id, wait(ctx, r.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, opTimeout(ctx))))
}

// RemoveServer removes a member from the configuration. The node will not
// re-add it automatically until AddVoter names it again.
func (n *Node) RemoveServer(ctx context.Context, id string) error {
	r, err := n.raftOrErr()
	if err != nil {
		return fmt.Errorf("remove server %s: %w", id, err)
	}
	if r.State() != raft.Leader {
		return fmt.Errorf("remove server %s: %w", id, n.notLeader(r))
	}
	n.mu.Lock()
	n.removed[id] = true
	n.mu.Unlock()
	return n.mapErr(r, "remove server "+id, wait(ctx, r.RemoveServer(raft.ServerID(id), 0, opTimeout(ctx))))
}

// MemberStatus describes one member: configured, in the raft configuration,
// or both.
type MemberStatus struct {
	ID       string
	Addr     string
	Suffrage string // "voter", "nonvoter", or "absent" (configured, not in the raft configuration)
	Witness  bool
	Leader   bool
	Self     bool
	// LastContact is the last sign of life from this member (raft traffic,
	// connection or probe); zero if never, or for this node itself.
	LastContact time.Time
	// Reachable reports whether the member answered the last probe, and
	// ReachableSince since when that has been so (or since this node's
	// first probe); zero for this node itself.
	Reachable      bool
	ReachableSince time.Time
	// SplitBrain is set when the member answered while leading a
	// configuration without this node (dual-active).
	SplitBrain bool
	// What the member said about itself in its last probe answer (empty if
	// it did not answer): raft state, term, cluster epoch and its voters.
	// A heal rule compares these.
	PeerState  string
	PeerTerm   uint64
	PeerEpoch  uint64
	PeerVoters []string
}

// Members lists the configured members and any other server in the raft
// configuration.
func (n *Node) Members() ([]MemberStatus, error) {
	r, err := n.raftOrErr()
	if err != nil {
		return nil, fmt.Errorf("members: %w", err)
	}
	_, leader := r.LeaderWithID()
	n.mu.RLock()
	reachable, split := n.reachable, n.splitBrain
	status := func(id, addr, suffrage string) MemberStatus {
		m, _ := n.cfg.member(id)
		ms := MemberStatus{ID: id, Addr: addr, Suffrage: suffrage, Witness: m.Witness, Leader: string(leader) == id, Self: id == n.cfg.NodeID}
		if t, ok := n.contact.lastContact(id); ok && !ms.Self {
			ms.LastContact = t
		}
		if !ms.Self {
			ms.ReachableSince = n.reachableSince[id]
		}
		if st, ok := reachable[id]; ok && !ms.Self {
			ms.Reachable = true
			ms.PeerState, ms.PeerTerm, ms.PeerEpoch, ms.PeerVoters = st.State, st.Term, st.Epoch, st.Voters
		}
		_, ms.SplitBrain = split[id]
		return ms
	}
	var out []MemberStatus
	seen := map[string]bool{}
	for _, s := range r.GetConfiguration().Configuration().Servers {
		suffrage := "voter"
		if s.Suffrage != raft.Voter {
			suffrage = "nonvoter"
		}
		out = append(out, status(string(s.ID), string(s.Address), suffrage))
		seen[string(s.ID)] = true
	}
	for _, m := range n.cfg.Members {
		if !seen[m.ID] {
			out = append(out, status(m.ID, m.RaftAddr, "absent"))
		}
	}
	n.mu.RUnlock()
	return out, nil
}

// Stats is a snapshot of the node's raft state.
type Stats struct {
	State        string
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64
	LastIndex    uint64
	LastContact  time.Time
	Leader       string
	ClusterEpoch uint64
	Voters       int
	// OverridePending is set after an override until its epoch bump commits.
	OverridePending bool
	// Unconfirmed is how long this leader has gone without a quorum
	// confirmation (a few tens of milliseconds while all is well; 0 on a
	// node that does not lead). While it exceeds the acting window the
	// Active acts on nothing.
	Unconfirmed time.Duration
}

// shownIndexes are the commit and applied indexes Stats reports. Applied
// is raft's, which counts the entries that never reach the state machine
// (a new leader's no-op, configuration changes), so an idle node shows
// commit = applied instead of an apparent lag; right after a start raft's
// is still behind a persistent state machine's (entries already applied
// are skipped, not replayed), hence the larger of the two. Commit is
// raft's unless that is lower: a restarted follower learns the commit
// index only from the leader's next append, and until then raft reports
// 0, while everything it has applied was committed.
func shownIndexes(raftCommit, raftApplied, fsmApplied uint64) (commit, applied uint64) {
	applied = max(raftApplied, fsmApplied)
	return max(raftCommit, applied), applied
}

// Stats reports term, indexes, last leader contact and state.
func (n *Node) Stats() Stats {
	st := Stats{State: "Shutdown", ClusterEpoch: n.cfg.FSM.ClusterEpoch(), OverridePending: n.epochPending.Load()}
	r, recovering := n.current()
	if recovering {
		st.State = "Recovering"
	}
	if r == nil {
		return st
	}
	state := r.State()
	st.State = state.String()
	st.Term = r.CurrentTerm()
	if since := n.leadingUnconfirmedSince.Load(); since != 0 && state == raft.Leader {
		st.Unconfirmed = max(n.cfg.Clock.Now().Sub(time.Unix(0, since)), 0)
	}
	var fsmApplied uint64
	if n.cfg.AppliedIndex != nil {
		fsmApplied = n.cfg.AppliedIndex()
	}
	st.CommitIndex, st.AppliedIndex = shownIndexes(r.CommitIndex(), r.AppliedIndex(), fsmApplied)
	st.LastIndex = r.LastIndex()
	st.LastContact = r.LastContact()
	_, leader := r.LeaderWithID()
	st.Leader = string(leader)
	for _, s := range r.GetConfiguration().Configuration().Servers {
		if s.Suffrage == raft.Voter {
			st.Voters++
		}
	}
	return st
}

// ManualOverride is the operator's lone-survivor recovery (scadactl
// override): the same re-formation as the automatic override, in any mode.
// It is refused while another voter answers unless force is set.
func (n *Node) ManualOverride(ctx context.Context, force bool) error {
	r, err := n.raftOrErr()
	if err != nil {
		return fmt.Errorf("manual override: %w", err)
	}
	if r.State() == raft.Leader && !force {
		return errors.New("manual override refused: this node leads a cluster with quorum")
	}
	return n.override(ctx, "manual override by operator", force)
}

// Rejoin discards this node's raft state and joins the configured cluster
// afresh: the last step of healing a dual-active split, run on the side the
// heal rule picked as the loser after it handed over what the winner lacks.
// resetFSM must empty the FSM (its applied index back to 0): the winner's
// history replaces it by snapshot or log replay, and a persistent FSM that
// kept its own index would skip entries it never saw. The node is Detached
// meanwhile; a leader whose configuration names the configured members
// re-admits it and it becomes Standby. Never call it on both sides: two
// fresh nodes form a new, empty cluster.
func (n *Node) Rejoin(ctx context.Context, resetFSM func(ctx context.Context) error) error {
	if resetFSM == nil {
		return errors.New("rejoin: resetFSM is required")
	}
	n.opMu.Lock()
	defer n.opMu.Unlock()
	if n.ctx.Err() != nil {
		return ErrShutdown
	}
	defer n.fenced.Store(false)
	n.log.Warn().Msg("REJOIN: discarding this node's raft state and FSM to join the configured cluster afresh")
	n.setRecovering(true)
	n.refreshRole()
	defer func() {
		n.setRecovering(false)
		n.wake()
	}()
	if err := n.stopRaft(); err != nil {
		n.log.Error().Err(err).Msg("rejoin: raft shutdown reported an error; continuing")
	}
	if err := n.closeLogStore(); err != nil {
		return fmt.Errorf("rejoin: close raft store: %w", err)
	}
	for _, p := range []string{n.logStorePath(), n.walPath(), filepath.Join(n.cfg.DataDir, "snapshots"), filepath.Join(n.cfg.DataDir, overrideMarker)} {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("rejoin: remove %s: %w", p, err)
		}
	}
	n.epochPending.Store(false)
	n.barrierTerm.Store(0)
	if err := resetFSM(ctx); err != nil {
		return fmt.Errorf("rejoin: reset FSM: %w", err)
	}
	if err := n.openStores(); err != nil {
		return fmt.Errorf("rejoin: %w", err)
	}
	trans := n.newTransport()
	err := raft.BootstrapCluster(n.cfg.raftConfig(n.hlog), n.logs, n.stable, n.snaps, trans, n.cfg.bootstrapConfiguration())
	_ = trans.Close()
	if err != nil {
		return fmt.Errorf("rejoin: bootstrap the configured membership: %w", err)
	}
	n.contact.restartWindow()
	if err := n.startRaft(); err != nil {
		return fmt.Errorf("rejoin: %w", err)
	}
	return nil
}
