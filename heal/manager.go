package heal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/raftnode"
	"github.com/scadad/scadad/role"
)

// Node is what the manager needs of the local raft node.
type Node interface {
	Members() ([]raftnode.MemberStatus, error)
	Fence(ctx context.Context, why string) error
	Unfence(ctx context.Context) error
	Rejoin(ctx context.Context, resetFSM func(ctx context.Context) error) error
	Fenced() bool
}

// RoleSource is the local role stream.
type RoleSource interface {
	Current() role.State
}

// Auditor records an audit entry on this node's own cluster.
type Auditor interface {
	Audit(ctx context.Context, actor, kind, detail string) error
}

// PeerDialer returns a client of the peer's Heal service.
type PeerDialer func(ctx context.Context, id string) (controlpb.HealClient, error)

// Config configures a Manager.
type Config struct {
	NodeID  string
	Peer    string // the other member of the pair
	DataDir string
	// Preferred is the preferred winner ("" = none); see the package doc.
	Preferred string
	Node      Node
	Roles     RoleSource
	State     State
	Auditor   Auditor
	Dial      PeerDialer
	// Redial, when set, drops the connection to the peer after a check
	// could not reach it, so the next check dials afresh. A connection
	// opened before a partition can sit in TCP retransmission backoff for
	// seconds after the link returns (the netns fault suite saw a loser
	// detect the split 6 s after the link was back), where a new one
	// connects at once.
	Redial func(id string)
	// ResetFSM empties the FSM before the rejoin (applied index 0).
	ResetFSM func(ctx context.Context) error
	Metrics  *Metrics
	Log      zerolog.Logger
	// Interval is the period of the check (default 250 ms); InfoTimeout
	// bounds the check's call for the peer's facts (default 1 s);
	// RPCTimeout bounds the merge's calls (default 5 s); AbandonAfter is
	// how long a fenced loser waits for an unreachable winner before it
	// abandons the merge (default 30 s).
	Interval     time.Duration
	InfoTimeout  time.Duration
	RPCTimeout   time.Duration
	AbandonAfter time.Duration
	Now          func() time.Time
}

// Status is the heal progress shown by scadactl status.
type Status struct {
	// Phase: "" (no split), "split" (detected), "winner" (waiting for the
	// loser), "fenced", "handed-over", "rejoining", "merged".
	Phase   string
	Peer    string
	Winner  string
	MergeID string
	Detail  string
	Since   time.Time
}

// String is the one line scadactl status prints.
func (s Status) String() string {
	if s.Phase == "" {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "heal: %s", s.Phase)
	if s.Peer != "" {
		fmt.Fprintf(&b, " (peer %s", s.Peer)
		if s.Winner != "" {
			fmt.Fprintf(&b, ", winner %s", s.Winner)
		}
		b.WriteString(")")
	}
	if s.MergeID != "" {
		fmt.Fprintf(&b, " merge %s", s.MergeID)
	}
	if s.Detail != "" {
		fmt.Fprintf(&b, ": %s", s.Detail)
	}
	if !s.Since.IsZero() {
		fmt.Fprintf(&b, " (since %s)", s.Since.UTC().Format(time.RFC3339))
	}
	return b.String()
}

// Manager runs the heal on one node: detection on both sides, the merge on
// the loser. The winner's side is the Absorber.
type Manager struct {
	cfg Config
	log zerolog.Logger

	mu       sync.Mutex
	status   Status
	detected string // key of the split already logged and audited
}

// NewManager returns a Manager; Run starts it.
func NewManager(cfg Config) *Manager {
	if cfg.Interval == 0 {
		cfg.Interval = 250 * time.Millisecond
	}
	if cfg.RPCTimeout == 0 {
		cfg.RPCTimeout = 5 * time.Second
	}
	if cfg.InfoTimeout == 0 {
		cfg.InfoTimeout = time.Second
	}
	if cfg.AbandonAfter == 0 {
		cfg.AbandonAfter = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	return &Manager{cfg: cfg, log: cfg.Log.With().Str("part", "heal").Logger()}
}

// Status returns the current heal progress.
func (m *Manager) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status
}

// Busy reports whether a merge is under way on this node (an operator
// override must wait).
func (m *Manager) Busy() bool {
	switch m.Status().Phase {
	case PhaseFenced, PhaseHandedOver, "rejoining":
		return true
	}
	_, ok, _ := LoadMarker(m.cfg.DataDir)
	return ok
}

func (m *Manager) setStatus(s Status) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.Phase != m.status.Phase || s.MergeID != m.status.MergeID {
		s.Since = m.cfg.Now()
	} else {
		s.Since = m.status.Since
	}
	m.status = s
}

// Facts returns this node's facts for the winner rule.
func (m *Manager) Facts(context.Context) (Facts, error) {
	st := m.cfg.Roles.Current()
	f := Facts{
		NodeID:       m.cfg.NodeID,
		Active:       st.Role == role.Active,
		ClusterEpoch: m.cfg.State.Meta().ClusterEpoch,
		Preferred:    m.cfg.Preferred,
	}
	if ms, err := m.cfg.Node.Members(); err == nil {
		for _, mm := range ms {
			if mm.Suffrage == "voter" {
				f.Voters = append(f.Voters, mm.ID)
			}
		}
	}
	err := m.cfg.State.AuditNewestFirst(func(e fsm.AuditEntry) bool {
		if e.Kind != "override" {
			return true
		}
		f.OverrideUnixNano, f.OverrideIndex = e.At.UnixNano(), e.LogIndex
		return false
	})
	if err != nil {
		return Facts{}, fmt.Errorf("heal facts: %w", err)
	}
	s := m.Status()
	f.Phase, f.MergeID = s.Phase, s.MergeID
	return f, nil
}

// Run checks for a split every Interval until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		m.tick(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (m *Manager) tick(ctx context.Context) {
	mk, ok, err := LoadMarker(m.cfg.DataDir)
	if err != nil {
		if errors.Is(err, ErrMarkerCorrupt) {
			m.log.Error().Err(err).Msg("heal marker corrupt; fix or remove it")
		} else {
			// Out of file descriptors and the like: nothing is wrong
			// with the marker, and the next tick reads it again.
			m.log.Warn().Err(err).Msg("could not read the heal marker; trying again at the next check")
		}
		m.setStatus(Status{Phase: "error", Detail: err.Error()})
		return
	}
	if ok {
		m.runLoser(ctx, mk)
		return
	}
	if m.cfg.Node.Fenced() {
		// Fenced without a marker: a merge was abandoned or finished
		// between the marker's removal and the unfence.
		if err := m.cfg.Node.Unfence(ctx); err != nil {
			m.log.Error().Err(err).Msg("heal: unfence without a merge marker failed")
		}
		return
	}
	m.detect(ctx)
}

// detect looks for a split and, on the loser, starts the merge.
func (m *Manager) detect(ctx context.Context) {
	prev := m.Status()
	if prev.Phase == "rejoining" {
		if st := m.cfg.Roles.Current(); st.Role == role.Standby || st.Role == role.Active {
			took := m.cfg.Now().Sub(prev.Since)
			m.log.Warn().Str("merge", prev.MergeID).Dur("rejoin", took).Stringer("role", st.Role).Msg("heal: rejoined the winner's cluster")
			m.cfg.Metrics.rejoinSeconds.Set(took.Seconds())
			m.setStatus(Status{Phase: "merged", Peer: prev.Peer, Winner: prev.Winner, MergeID: prev.MergeID})
		}
		return
	}
	ms, err := m.cfg.Node.Members()
	if err != nil {
		return
	}
	var peer raftnode.MemberStatus
	for _, mm := range ms {
		if mm.ID == m.cfg.Peer {
			peer = mm
		}
	}
	if !peer.SplitBrain {
		if prev.Phase == "split" || prev.Phase == "winner" {
			m.log.Info().Str("peer", m.cfg.Peer).Msg("heal: the split is over")
			m.cfg.Metrics.splitActive.Set(0)
			m.setStatus(Status{Phase: "merged", Peer: prev.Peer, Winner: prev.Winner, MergeID: prev.MergeID})
		}
		return
	}
	self, err := m.Facts(ctx)
	if err != nil || !self.Active {
		return
	}
	cli, err := m.cfg.Dial(ctx, m.cfg.Peer)
	if err != nil {
		m.setStatus(Status{Phase: "split", Peer: m.cfg.Peer, Detail: "peer control API: " + err.Error()})
		return
	}
	rctx, cancel := context.WithTimeout(ctx, m.cfg.InfoTimeout)
	pf, err := cli.HealInfo(rctx, &controlpb.HealInfoRequest{})
	cancel()
	if err != nil {
		m.setStatus(Status{Phase: "split", Peer: m.cfg.Peer, Detail: "peer heal info: " + err.Error()})
		if m.cfg.Redial != nil && ctx.Err() == nil {
			m.cfg.Redial(m.cfg.Peer)
		}
		return
	}
	peerFacts := factsFromProto(pf)
	if !peerFacts.Active {
		if peerFacts.Phase == PhaseFenced || peerFacts.Phase == PhaseHandedOver {
			// The loser decided first; the split is still this side's to
			// report.
			m.noteSplit(ctx, self, peerFacts, Verdict{Winner: m.cfg.NodeID, Loser: peerFacts.NodeID, Reason: "the peer found it lost and is merging into this cluster"})
		}
		m.setStatus(Status{Phase: "winner", Peer: m.cfg.Peer, Winner: m.cfg.NodeID, MergeID: peerFacts.MergeID,
			Detail: fmt.Sprintf("peer is %s, merging into this cluster", orDash(peerFacts.Phase))})
		return
	}
	v := Decide(self, peerFacts)
	m.noteSplit(ctx, self, peerFacts, v)
	if v.Winner == m.cfg.NodeID {
		m.setStatus(Status{Phase: "winner", Peer: m.cfg.Peer, Winner: v.Winner, Detail: "waiting for the peer to hand its work over (" + v.Reason + ")"})
		return
	}
	m.beginLoser(ctx, cli, self, v)
}

// NoteSplit logs, counts and audits a split once, however it was learnt
// of (this side's probe, or the loser's merge request).
func (m *Manager) NoteSplit(ctx context.Context, self, peer Facts, v Verdict) {
	m.noteSplit(ctx, self, peer, v)
	if v.Winner == m.cfg.NodeID && m.Status().Phase != "winner" {
		// So the probe loop ends the split (and its gauge) once the peer
		// is back in this cluster.
		m.setStatus(Status{Phase: "winner", Peer: m.cfg.Peer, Winner: v.Winner, Detail: "the peer found it lost and is merging into this cluster"})
	}
}

// noteSplit logs, counts and audits a split once.
func (m *Manager) noteSplit(ctx context.Context, self, peer Facts, v Verdict) {
	key := fmt.Sprintf("%s/%d/%d", peer.NodeID, peer.ClusterEpoch, peer.OverrideUnixNano)
	m.mu.Lock()
	seen := m.detected == key
	m.detected = key
	m.mu.Unlock()
	if seen {
		return
	}
	m.cfg.Metrics.splitsDetected.Inc()
	m.cfg.Metrics.splitActive.Set(1)
	detail := fmt.Sprintf("peer %s is Active under cluster epoch %d (this node %s: epoch %d); winner %s because %s",
		peer.NodeID, peer.ClusterEpoch, self.NodeID, self.ClusterEpoch, v.Winner, v.Reason)
	m.log.Error().Str("peer", peer.NodeID).Uint64("peer_epoch", peer.ClusterEpoch).Uint64("epoch", self.ClusterEpoch).
		Str("winner", v.Winner).Str("reason", v.Reason).Msg("DUAL-ACTIVE: both nodes are Active; healing")
	if err := m.cfg.Auditor.Audit(ctx, "heal@"+m.cfg.NodeID, KindSplitDetected, detail); err != nil {
		m.log.Warn().Err(err).Msg("heal: split audit entry not recorded")
	}
}

func (m *Manager) beginLoser(ctx context.Context, cli controlpb.HealClient, self Facts, v Verdict) {
	mergeID := fmt.Sprintf("%s-%s-%d", m.cfg.NodeID, v.Winner, m.cfg.Now().UnixNano())
	rctx, cancel := context.WithTimeout(ctx, m.cfg.RPCTimeout)
	_, err := cli.HealBegin(rctx, &controlpb.HealBeginRequest{MergeId: mergeID, Loser: factsToProto(self)})
	cancel()
	if err != nil {
		m.setStatus(Status{Phase: "split", Peer: m.cfg.Peer, Winner: v.Winner, Detail: "winner refused or unreachable: " + err.Error()})
		m.log.Warn().Err(err).Str("winner", v.Winner).Msg("heal: the winner did not accept the merge; will retry")
		return
	}
	mk := Marker{MergeID: mergeID, Winner: v.Winner, Phase: PhaseFenced, Started: m.cfg.Now().UTC(),
		LoserEpoch: self.ClusterEpoch, OverrideIndex: self.OverrideIndex}
	if err := SaveMarker(m.cfg.DataDir, mk); err != nil {
		m.log.Error().Err(err).Msg("heal: cannot write the merge marker; not merging")
		return
	}
	m.log.Warn().Str("merge", mergeID).Str("winner", v.Winner).Str("reason", v.Reason).Msg("heal: this node lost the split; fencing and handing its work over")
	m.runLoser(ctx, mk)
}

// runLoser drives (or resumes) the loser's merge from the marker's phase.
func (m *Manager) runLoser(ctx context.Context, mk Marker) {
	st := Status{Phase: mk.Phase, Peer: mk.Winner, Winner: mk.Winner, MergeID: mk.MergeID}
	if mk.Phase == PhaseFenced {
		m.setStatus(st)
		if err := m.cfg.Node.Fence(ctx, "dual-active heal "+mk.MergeID+": handing over to "+mk.Winner); err != nil {
			m.log.Error().Err(err).Msg("heal: fence failed")
			return
		}
		start := m.cfg.Now()
		var lastErr error
		for {
			err := m.handOver(ctx, mk, func(detail string) {
				st.Detail = detail
				m.setStatus(st)
			})
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			lastErr = err
			st.Detail = "retrying: " + err.Error()
			m.setStatus(st)
			m.log.Warn().Err(err).Str("merge", mk.MergeID).Msg("heal: hand-over interrupted; retrying")
			if errors.Is(err, errRefused) || m.cfg.Now().Sub(start) > m.cfg.AbandonAfter {
				m.abandon(ctx, mk, lastErr)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(m.cfg.Interval * 4):
			}
		}
		m.cfg.Metrics.handOverSeconds.Set(m.cfg.Now().Sub(start).Seconds())
		mk.Phase = PhaseHandedOver
		if err := SaveMarker(m.cfg.DataDir, mk); err != nil {
			m.log.Error().Err(err).Msg("heal: cannot record the hand-over; will repeat it")
			return
		}
	}
	st.Phase, st.Detail = PhaseHandedOver, "wiping raft state and FSM; rejoining"
	m.setStatus(st)
	if err := m.cfg.Node.Rejoin(ctx, m.cfg.ResetFSM); err != nil {
		m.log.Error().Err(err).Str("merge", mk.MergeID).Msg("heal: rejoin failed; a restart resumes it")
		st.Detail = "rejoin failed (restart the node to resume): " + err.Error()
		m.setStatus(st)
		return
	}
	if err := RemoveMarker(m.cfg.DataDir); err != nil {
		m.log.Error().Err(err).Msg("heal: remove marker")
	}
	m.cfg.Metrics.merges.WithLabelValues("merged").Inc()
	m.cfg.Metrics.splitActive.Set(0)
	m.log.Warn().Str("merge", mk.MergeID).Str("winner", mk.Winner).Msg("heal: handed over and rejoined; waiting to be re-added as Standby")
	m.setStatus(Status{Phase: "rejoining", Peer: mk.Winner, Winner: mk.Winner, MergeID: mk.MergeID, Detail: "waiting to be re-added by the winner"})
}

// abandon gives the merge up: the node is its own Active cluster again.
func (m *Manager) abandon(ctx context.Context, mk Marker, why error) {
	m.log.Error().Err(why).Str("merge", mk.MergeID).Str("winner", mk.Winner).
		Msg("heal: winner unreachable or refusing; abandoning the merge and resuming this node's own cluster")
	if err := RemoveMarker(m.cfg.DataDir); err != nil {
		m.log.Error().Err(err).Msg("heal: remove marker")
		return
	}
	if err := m.cfg.Node.Unfence(ctx); err != nil {
		m.log.Error().Err(err).Msg("heal: unfence failed")
	}
	m.cfg.Metrics.merges.WithLabelValues("abandoned").Inc()
	m.mu.Lock()
	m.detected = ""
	m.mu.Unlock()
	m.setStatus(Status{Phase: "split", Peer: mk.Winner, Winner: mk.Winner, MergeID: mk.MergeID, Detail: "merge abandoned: " + why.Error()})
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
