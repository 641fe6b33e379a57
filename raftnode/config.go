package raftnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/clock"
	"github.com/scadad/scadad/pki"
)

// Mode selects what a node does when it loses quorum.
type Mode string

const (
	// ModeWitness runs two voters plus a witness voter; never dual-active.
	ModeWitness Mode = "witness"
	// ModePair runs two voters; a lone survivor that has had no contact with
	// its peer for OverrideAfter re-forms the cluster alone.
	ModePair Mode = "pair"
	// ModeStrict never overrides: losing quorum means waiting.
	ModeStrict Mode = "strict"
)

// Member is one configured cluster member. The list is identical on all
// nodes and is what every node bootstraps from.
type Member struct {
	ID       string
	RaftAddr string
	// Witness marks the tiny third voter that must never keep leadership.
	Witness bool
}

// FSM is what the node needs from the state machine. The real FSM also
// implements raft.BatchingFSM; the node hands it to raft unwrapped so raft
// can batch.
type FSM interface {
	raft.FSM
	// ClusterEpoch is the epoch bumped by every availability override.
	ClusterEpoch() uint64
}

// Config configures a Node. Zero durations take the LAN defaults.
type Config struct {
	NodeID string
	// BindAddr is where the raft transport listens; AdvertiseAddr is what
	// peers dial (default: this node's RaftAddr in Members). Listener, when
	// set, is used instead of listening on BindAddr (tests).
	BindAddr      string
	AdvertiseAddr string
	Listener      net.Listener
	DataDir       string
	Members       []Member
	Mode          Mode

	// OverrideAfter is how long a pair-mode survivor must have had no contact
	// at all with its peer before it re-forms the cluster alone.
	OverrideAfter time.Duration
	// ProbeInterval and ProbeTimeout drive the peer probe: a TLS handshake
	// against each peer's raft port.
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	// RoleInterval is the period of the role re-evaluation on top of the
	// event-driven one.
	RoleInterval time.Duration

	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// WitnessHeartbeatTimeout and WitnessElectionTimeout are the witness's
	// (defaults: HeartbeatTimeout/2 and 3 x ElectionTimeout). A follower
	// rejects votes while it still believes in a leader, so after a leader
	// dies the follower that times out second wins. A witness with a shorter
	// heartbeat timeout times out first, fails its pre-vote (the voter still
	// believes in the leader), backs off for its long election timeout, and
	// is ready to grant the voter's vote: the voter wins, and failover takes
	// the voter's heartbeat timeout. A longer witness heartbeat timeout would
	// instead delay every failover to the witness's timeout. If the witness
	// wins anyway it hands leadership off at once. When the witness holds
	// entries the voter lacks, the voter cannot win: the witness then
	// stands as soon as it refuses the voter's pre-vote (witnessvote.go).
	WitnessHeartbeatTimeout time.Duration
	WitnessElectionTimeout  time.Duration
	SnapshotThreshold       uint64
	SnapshotInterval        time.Duration
	TrailingLogs            uint64

	// ServerTLS is used for accepted connections, ClientTLS for dialing peers.
	// Both are required: there is no plaintext mode.
	ServerTLS *tls.Config
	ClientTLS *tls.Config
	// Conns, when set, tracks every raft connection, accepted or dialed,
	// by its peer's certificate, so the caller closes those of a revoked
	// node (pki.Tracker.CloseRevoked): its next handshake is refused by
	// the TLS configurations' own check, and this ends what is open.
	Conns *pki.Tracker

	// Logger is the caller's, already naming the node (scadad's carries
	// node=<id>): raftnode adds no node key of its own, so no line has two.
	Logger zerolog.Logger
	Clock  clock.Clock // the override and contact logic's time source; default the wall clock
	// Rand returns a float in [0,1); it jitters the probe period.
	Rand func() float64

	FSM FSM
	// AppliedIndex reports the index the FSM has durably applied (for the
	// real FSM: func() uint64 { return f.Meta().AppliedIndex }). When set,
	// the FSM is treated as persistent: raft does not restore the snapshot at
	// start (NoSnapshotRestoreOnStart) unless the FSM is behind it, and an
	// override does not rewind it. Leave it nil for an in-memory FSM.
	AppliedIndex func() uint64
	// ReleaseLogPages, when set, hands the resident pages of the raft log
	// file's memory map back to the kernel. It is called while no write to
	// the file can move or unmap raft-boltdb's map (so it may unmap the
	// pages), after every 16 MiB of entries stored or read and after every
	// chunk of a log compaction.
	ReleaseLogPages func(path string) error
	// OnOverride is called on the new sole leader after an override with the
	// epoch to record (current + 1). It applies SetClusterEpoch and the audit
	// entry. The node stays Detached until it succeeds.
	OnOverride func(ctx context.Context, newEpoch uint64) error
	// StartFenced opens the stores and answers probes but does not start
	// raft: a heal interrupted after it fenced this node resumes without the
	// node becoming Active on its old cluster first (see Fence).
	StartFenced bool
	// LogStore picks the raft log store (default LogStoreAuto). Opening
	// with LogStoreWAL moves an existing raft.db into the WAL first.
	LogStore LogStore
	// LeaderWrite says whether a leader writes its own copy of new
	// entries while it replicates them (LeaderWriteParallel, the default)
	// or before (LeaderWriteSequential, hashicorp/raft's order).
	LeaderWrite LeaderWrite
	// VerifyLogStore runs the full check of raft.db before it is opened
	// (bbolt's consistency check and a read of every byte); the size check
	// runs always.
	VerifyLogStore bool
	// ApplyBlocked, when set, reports that the FSM stopped applying (an
	// entry above its feature level): the node is then Detached whatever
	// raft says, keeps storing and voting, and hands leadership away.
	ApplyBlocked func() bool

	// wrapLogStore, in tests, wraps the opened log store (to hold or fail
	// its writes).
	wrapLogStore func(logStableStore) logStableStore
}

func (c Config) applyBlocked() bool { return c.ApplyBlocked != nil && c.ApplyBlocked() }

// Defaults tuned for a LAN pair: about one second from a leader's death to a
// new leader.
const (
	DefaultOverrideAfter     = 10 * time.Second
	DefaultProbeInterval     = 300 * time.Millisecond
	DefaultProbeTimeout      = time.Second
	DefaultRoleInterval      = 100 * time.Millisecond
	DefaultHeartbeatTimeout  = 500 * time.Millisecond
	DefaultElectionTimeout   = 500 * time.Millisecond
	DefaultCommitTimeout     = 10 * time.Millisecond
	DefaultSnapshotThreshold = 8192
	DefaultSnapshotInterval  = 2 * time.Minute
	DefaultTrailingLogs      = 10240
)

// DefaultLeaderLease is the leader lease for a heartbeat timeout: a tenth
// below it. On resuming from a freeze (a stalled VM, SIGSTOP) raft checks
// the lease before the first heartbeat answer arrives, so the lease, less
// the heartbeat spacing (a tenth to a fifth of the timeout), is the
// longest freeze the leader rides out: about 350 ms at the 500 ms default,
// close to what the followers ride out before they stand (the heartbeat
// timeout less that spacing). At half the timeout a 300 ms freeze stepped
// the leader down in 5 of 6 trials though nobody stood against it. It
// stays below the timeout: the dead-leader watch lowers the timeout to it.
func DefaultLeaderLease(heartbeat time.Duration) time.Duration {
	return max(heartbeat-heartbeat/10, 5*time.Millisecond)
}

func (c *Config) applyDefaults() {
	setDur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	setDur(&c.OverrideAfter, DefaultOverrideAfter)
	setDur(&c.ProbeInterval, DefaultProbeInterval)
	setDur(&c.ProbeTimeout, DefaultProbeTimeout)
	setDur(&c.RoleInterval, DefaultRoleInterval)
	setDur(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	setDur(&c.ElectionTimeout, DefaultElectionTimeout)
	setDur(&c.LeaderLeaseTimeout, DefaultLeaderLease(c.HeartbeatTimeout))
	setDur(&c.CommitTimeout, DefaultCommitTimeout)
	setDur(&c.WitnessHeartbeatTimeout, max(c.HeartbeatTimeout/2, 5*time.Millisecond))
	setDur(&c.WitnessElectionTimeout, 3*c.ElectionTimeout)
	setDur(&c.SnapshotInterval, DefaultSnapshotInterval)
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = DefaultTrailingLogs
	}
	if c.Clock == nil {
		c.Clock = clock.System()
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	if c.Mode == "" {
		c.Mode = ModeWitness
	}
	if c.LeaderWrite == "" {
		c.LeaderWrite = LeaderWriteParallel
	}
	if c.LogStore == "" {
		c.LogStore = LogStoreAuto
	}
	if c.AdvertiseAddr == "" {
		if m, ok := c.member(c.NodeID); ok {
			c.AdvertiseAddr = m.RaftAddr
		}
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.NodeID == "" {
		errs = append(errs, errors.New("NodeID is empty"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("DataDir is empty"))
	}
	if c.BindAddr == "" && c.Listener == nil {
		errs = append(errs, errors.New("neither BindAddr nor Listener is set"))
	}
	if c.ServerTLS == nil || c.ClientTLS == nil {
		errs = append(errs, errors.New("ServerTLS and ClientTLS are both required (no plaintext transport)"))
	}
	if c.FSM == nil {
		errs = append(errs, errors.New("FSM is nil"))
	}
	switch c.Mode {
	case ModeWitness, ModePair, ModeStrict:
	default:
		errs = append(errs, fmt.Errorf("mode %q is not witness, pair or strict", c.Mode))
	}
	if c.LeaderWrite != LeaderWriteParallel && c.LeaderWrite != LeaderWriteSequential {
		errs = append(errs, fmt.Errorf("leader write %q is not parallel or sequential", c.LeaderWrite))
	}
	if c.LogStore != LogStoreBoltDB && c.LogStore != LogStoreWAL && c.LogStore != LogStoreAuto {
		errs = append(errs, fmt.Errorf("log store %q is not auto, boltdb or wal", c.LogStore))
	}
	seenID, seenAddr := map[string]bool{}, map[string]bool{}
	witnesses := 0
	for _, m := range c.Members {
		if m.ID == "" || m.RaftAddr == "" {
			errs = append(errs, fmt.Errorf("member %+v needs an ID and a RaftAddr", m))
		}
		if seenID[m.ID] || seenAddr[m.RaftAddr] {
			errs = append(errs, fmt.Errorf("member %q (%s) listed twice", m.ID, m.RaftAddr))
		}
		seenID[m.ID], seenAddr[m.RaftAddr] = true, true
		if m.Witness {
			witnesses++
		}
	}
	if !seenID[c.NodeID] {
		errs = append(errs, fmt.Errorf("NodeID %q is not among the members", c.NodeID))
	}
	switch {
	case c.Mode == ModeWitness && witnesses != 1:
		errs = append(errs, fmt.Errorf("witness mode needs exactly one witness member, have %d", witnesses))
	case c.Mode == ModePair && (witnesses != 0 || len(c.Members) != 2):
		errs = append(errs, fmt.Errorf("pair mode needs exactly two members and no witness, have %d members and %d witnesses", len(c.Members), witnesses))
	}
	if c.ProbeInterval >= c.OverrideAfter || c.ProbeTimeout >= c.OverrideAfter {
		errs = append(errs, fmt.Errorf("ProbeInterval %s and ProbeTimeout %s must be shorter than OverrideAfter %s", c.ProbeInterval, c.ProbeTimeout, c.OverrideAfter))
	}
	if len(errs) > 0 {
		return fmt.Errorf("raftnode config: %w", errors.Join(errs...))
	}
	return nil
}

func (c *Config) member(id string) (Member, bool) {
	for _, m := range c.Members {
		if m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

func (c *Config) isWitness() bool {
	m, _ := c.member(c.NodeID)
	return m.Witness
}

// bootstrapConfiguration is the configured membership as a raft
// configuration, sorted so every node writes the same index-1 entry.
func (c *Config) bootstrapConfiguration() raft.Configuration {
	servers := make([]raft.Server, 0, len(c.Members))
	for _, m := range c.Members {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.RaftAddr)})
	}
	sort.Slice(servers, func(i, j int) bool { return servers[i].ID < servers[j].ID })
	return raft.Configuration{Servers: servers}
}

func (c *Config) raftConfig(logger *hclogAdapter) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.NodeID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	if c.isWitness() {
		rc.HeartbeatTimeout = c.WitnessHeartbeatTimeout
		rc.ElectionTimeout = c.WitnessElectionTimeout
	}
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	if c.isWitness() {
		// Below the witness's heartbeat timeout, so its dead-leader watch
		// can lower that timeout to the lease (deadLeaderLoop). The lease
		// is also the lowest election timeout raft takes, so it bounds how
		// soon the witness can stand after refusing a voter's pre-vote
		// (witnessvote.go): a fifth of its heartbeat timeout. A witness
		// leads only while it hands off, and then with its heartbeat
		// timeout lowered to the lease (settleStand), so its heartbeats (a
		// tenth of that) stay well inside the lease.
		rc.LeaderLeaseTimeout = min(c.LeaderLeaseTimeout, max(rc.HeartbeatTimeout/5, 5*time.Millisecond))
	}
	rc.CommitTimeout = c.CommitTimeout
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.SnapshotInterval = c.SnapshotInterval
	rc.TrailingLogs = c.TrailingLogs
	rc.BatchApplyCh = true
	// Pre-vote keeps a node that was cut off from raising the term and
	// deposing a healthy leader when it comes back.
	rc.PreVoteDisabled = false
	rc.NoSnapshotRestoreOnStart = c.AppliedIndex != nil
	rc.Logger = logger
	return rc
}
