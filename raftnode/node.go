package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/rs/zerolog"
	"go.etcd.io/bbolt"

	"github.com/scadad/scadad/internal/boltsafe"
	"github.com/scadad/scadad/role"
)

// overrideMarker is written before an override re-forms the cluster and
// removed once the epoch bump is committed, so a crash in between still
// bumps the epoch after restart.
const overrideMarker = "override-pending"

// Node is one scadad raft member.
type Node struct {
	cfg     Config
	log     zerolog.Logger
	hlog    *hclogAdapter
	store   logStableCloser  // raft-boltdb or raft-wal, closed by Stop
	stable  raft.StableStore // store, through the page-releasing wrapper
	pages   atomic.Pointer[releasingStore]
	logs    raft.LogStore               // the cache over lead
	lead    *parallelLog                // the log store as raft writes it (see leaderlog.go)
	leadNow atomic.Pointer[parallelLog] // lead, for LogFailure (read outside the operations that replace lead)
	snaps   *snapshotStore
	stream  *tlsStream
	contact *contacts
	appends appendOutcomes // what followers did with the entries we sent
	// leaving is set by LeaveVoters for the rest of the process's life.
	leaving atomic.Bool
	bc      *role.Broadcaster
	obsCh   chan raft.Observation

	// opMu serialises the operations that replace or stop raft: override,
	// shutdown.
	opMu sync.Mutex
	// pubMu orders role publication against Shutdown, so nothing is
	// published after the final Detached.
	pubMu sync.Mutex

	mu         sync.RWMutex
	r          *raft.Raft
	running    atomic.Pointer[raft.Raft] // r, read without mu by the log store's writes
	obs        *raft.Observer
	trans      *noPipelineTransport // r's transport
	recovering bool
	removed    map[string]bool       // members an operator removed: never re-added automatically
	reachable  map[string]peerStatus // last probe answer per member
	// reachableSince is when each member's probe outcome last changed (or
	// the first probe): how long a peer has been down is what an operator
	// asks first.
	reachableSince map[string]time.Time
	splitBrain     map[string]peerStatus // peers found leading a cluster without us

	epochPending atomic.Bool
	barrierTerm  atomic.Uint64
	barrierBusy  atomic.Bool
	handoffBusy  atomic.Bool
	// followedLeader is the last other member this node knew as leader:
	// the one that lost when this node won (see handoffTargets).
	followedLeader atomic.Pointer[string]
	// overrideNoticed: the coming override has been announced for the
	// current silence (guard loop only).
	overrideNoticed bool
	// fenced is set while a heal keeps raft stopped (see rejoin.go).
	fenced atomic.Bool
	// leaderVerifiedAt is when a quorum last confirmed this node's
	// leadership (unix nanoseconds; see verify.go).
	leaderVerifiedAt atomic.Int64
	// leadingUnconfirmedSince is the start of the current spell without a
	// confirmation of this leadership (its last confirmation, or when it
	// began to lead; unix nanoseconds), 0 when not leading: verifyLoop's
	// lateConfirmation keeps it, Stats reads it.
	leadingUnconfirmedSince atomic.Int64
	// logWriting, applying and snapshotting are the raft log write, the
	// state machine apply and its snapshot in progress, for
	// StorageStalled.
	logWriting   storageWatch
	applying     storageWatch
	snapshotting storageWatch

	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	shutOnce sync.Once
	shutErr  error
}

// New opens the node's stores, bootstraps the configured membership if the
// node has no raft state, starts raft and the role, probe and override
// loops.
func New(cfg Config) (*Node, error) {
	cfg.applyDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir %s: %w", cfg.DataDir, err)
	}
	log := cfg.Logger.With().Str("component", "raftnode").Logger()
	// The first state published carries the epoch this node's state already
	// holds: consumers never see it go backwards, and a restart does not
	// show as an epoch raised from 0 (scadad_cluster_epoch, the
	// ScadadEpochRaised alert).
	initial := role.State{Role: role.Detached, NodeID: cfg.NodeID, Epoch: role.Epoch{Cluster: cfg.FSM.ClusterEpoch()}}
	n := &Node{
		cfg:          cfg,
		log:          log,
		hlog:         newHclogAdapter(cfg.Logger.With().Str("component", "raft").Logger(), ""),
		contact:      newContacts(cfg.Clock),
		logWriting:   storageWatch{clock: cfg.Clock},
		applying:     storageWatch{clock: cfg.Clock},
		snapshotting: storageWatch{clock: cfg.Clock},
		bc:           role.NewBroadcaster(initial),
		obsCh:        make(chan raft.Observation, 64),
		removed:      make(map[string]bool),
		reachable:    make(map[string]peerStatus),
		splitBrain:   make(map[string]peerStatus),

		reachableSince: make(map[string]time.Time),
	}
	if err := n.open(); err != nil {
		n.closeStores()
		return nil, err
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wg.Add(4)
	go n.roleLoop()
	go n.guardLoop()
	go n.verifyLoop()
	go n.deadLeaderLoop()
	return n, nil
}

func (n *Node) open() error {
	var err error
	if err := n.openStores(); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(n.cfg.DataDir, overrideMarker)); err == nil {
		n.log.Warn().Msg("an override did not finish recording its epoch bump before the last stop; it will be bumped once this node leads")
		n.epochPending.Store(true)
	}
	ln := n.cfg.Listener
	if ln == nil {
		ln, err = net.Listen("tcp", n.cfg.BindAddr)
		if err != nil {
			return fmt.Errorf("listen for raft on %s: %w", n.cfg.BindAddr, err)
		}
	}
	n.stream = newTLSStream(ln, n.cfg.AdvertiseAddr, n.cfg.ServerTLS, n.cfg.ClientTLS, n, n.contact.touch, n.probeStatus, n.log)
	n.stream.conns = n.cfg.Conns

	if err := n.restoreIfBehind(); err != nil {
		return err
	}
	hasState, err := raft.HasExistingState(n.logs, n.stable, n.snaps)
	if err != nil {
		return fmt.Errorf("check for existing raft state: %w", err)
	}
	rc := n.cfg.raftConfig(n.hlog)
	if !hasState {
		// Every node bootstraps the same configuration, so the index-1
		// entries match and whichever node starts first can lead the other.
		trans := n.newTransport()
		err := raft.BootstrapCluster(rc, n.logs, n.stable, n.snaps, trans, n.cfg.bootstrapConfiguration())
		_ = trans.Close()
		if err != nil {
			return fmt.Errorf("bootstrap raft with the configured members: %w", err)
		}
		n.log.Info().Int("members", len(n.cfg.Members)).Msg("bootstrapped raft with the configured membership")
	}
	if n.cfg.StartFenced {
		n.startFenced()
		return nil
	}
	return n.startRaft()
}

// restoreIfBehind restores the newest snapshot into a persistent FSM whose
// own applied index is behind it (its file was lost or replaced): raft will
// not, because NoSnapshotRestoreOnStart is set for persistent FSMs.
func (n *Node) restoreIfBehind() error {
	if n.cfg.AppliedIndex == nil {
		return nil
	}
	metas, err := n.snaps.List()
	if err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	}
	if len(metas) == 0 {
		return nil
	}
	newest := metas[0]
	applied := n.cfg.AppliedIndex()
	if applied >= newest.Index {
		return nil
	}
	n.log.Warn().Uint64("fsm_applied", applied).Uint64("snapshot_index", newest.Index).Str("snapshot", newest.ID).
		Msg("FSM is behind the newest snapshot; restoring it before starting raft")
	_, rc, err := n.snaps.Open(newest.ID)
	if err != nil {
		return fmt.Errorf("open snapshot %s: %w", newest.ID, err)
	}
	defer rc.Close()
	if err := n.cfg.FSM.Restore(rc); err != nil {
		return fmt.Errorf("restore snapshot %s into the FSM: %w", newest.ID, err)
	}
	return nil
}

// logCacheEntries is how many recent log entries raft keeps in memory for
// replication and apply. An entry can carry a whole enqueue batch (64 KiB
// and more), so the cache is a large part of the heap: 128 entries are
// seconds of traffic, more than a healthy follower lags; an older entry is
// read from raft.db.
const logCacheEntries = 128

// ReleaseLogPages hands the resident pages of the raft log file's map back
// to the kernel now (Config.ReleaseLogPages), between writes. Entry traffic
// releases them as it goes; this is for a caller on a timer, to catch the
// remainder once traffic stops.
func (n *Node) ReleaseLogPages() {
	if s := n.pages.Load(); s != nil {
		s.releaseNow()
	}
}

// LogFailure returns the write failure that stopped this node's raft log,
// or nil. After one the node appends nothing more until it is restarted
// and reads its log from disk again (see parallelLog): the daemon stops on
// it, as on a failure of the state file.
func (n *Node) LogFailure() error {
	if p := n.leadNow.Load(); p != nil {
		return p.failure()
	}
	return nil
}

// closeLogStore writes what the leader queued, then closes raft.db or the
// WAL, never while raft.db's pages are being released.
func (n *Node) closeLogStore() error {
	var queued error
	if n.lead != nil {
		queued = n.lead.Close()
	}
	if s := n.pages.Load(); s != nil {
		return errors.Join(queued, s.closeStore(n.store.Close))
	}
	return errors.Join(queued, n.store.Close())
}

// leadingWithPeers reports whether new entries may be written to the log
// while they replicate (parallelLog): on a leader with another voter to
// answer for them.
func (n *Node) leadingWithPeers() bool {
	if n.cfg.LeaderWrite != LeaderWriteParallel {
		return false
	}
	r := n.running.Load()
	if r == nil || r.State() != raft.Leader {
		return false
	}
	voters := 0
	for _, s := range r.GetConfiguration().Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	return voters > 1
}

// logStorePath is the bbolt file of the raft log and stable store.
func (n *Node) logStorePath() string { return filepath.Join(n.cfg.DataDir, "raft.db") }

// openStores opens the log and stable store (raft.db, or raft-wal/ with
// LogStoreWAL) and the snapshot store
// (DataDir/snapshots, two retained).
func (n *Node) openStores() error {
	var (
		store logStableCloser
		both  logStableStore
		pages *releasingStore
	)
	if n.cfg.LogStore == LogStoreAuto {
		resolved, err := n.resolveAuto()
		if err != nil {
			return err
		}
		n.cfg.LogStore = resolved
		n.log.Info().Str("log_store", string(resolved)).Msg("raft.log_store: auto picked the raft log store from the data folder")
	}
	switch n.cfg.LogStore {
	case LogStoreWAL:
		w, err := n.openWAL()
		if err != nil {
			return err
		}
		store, both = w, w
	default:
		if err := n.refuseWALForBolt(); err != nil {
			return err
		}
		dbPath := n.logStorePath()
		if err := boltsafe.Verify(context.Background(), dbPath, boltsafe.Options{Full: n.cfg.VerifyLogStore}); err != nil {
			return damagedLog(dbPath, err)
		}
		var bs *raftboltdb.BoltStore
		err := boltsafe.Guard(dbPath, func() error {
			var err error
			bs, err = raftboltdb.New(raftboltdb.Options{Path: dbPath, BoltOptions: &bbolt.Options{Timeout: time.Second}})
			return err
		})
		if err != nil {
			return damagedLog(dbPath, err)
		}
		store, both = bs, bs
		if n.cfg.ReleaseLogPages != nil {
			pages = &releasingStore{logStableStore: bs, path: dbPath, release: n.cfg.ReleaseLogPages, every: 16 << 20, log: n.log}
			both = pages
		}
	}
	if n.cfg.wrapLogStore != nil {
		both = n.cfg.wrapLogStore(both)
	}
	lead, err := newParallelLog(both, n.leadingWithPeers, n.log, &n.logWriting)
	if err != nil {
		_ = store.Close()
		return err
	}
	logs, err := raft.NewLogCache(logCacheEntries, lead)
	if err != nil {
		_ = store.Close()
		return fmt.Errorf("create raft log cache: %w", err)
	}
	snaps, err := openSnapshotStore(n.cfg.DataDir, 2, n.hlog, n.log)
	if err != nil {
		_ = store.Close()
		return err
	}
	n.store, n.stable, n.logs, n.lead, n.snaps = store, both, logs, lead, snaps
	n.leadNow.Store(lead)
	n.pages.Store(pages)
	return nil
}

// ErrDamagedLog is returned by New for a raft log file (raft.db) that cannot
// be read whole.
var ErrDamagedLog = errors.New("raft log store is damaged")

func damagedLog(path string, err error) error {
	if errors.Is(err, boltsafe.ErrDamaged) {
		return fmt.Errorf("%w: %w", ErrDamagedLog, err)
	}
	return fmt.Errorf("open raft store %s: %w", path, err)
}

func (n *Node) startRaft() error {
	return n.startRaftWith(n.cfg.raftConfig(n.hlog))
}

// startRaftWith is startRaft with a given raft configuration.
func (n *Node) startRaftWith(rc *raft.Config) error {
	trans := n.newTransport()
	r, err := raft.NewRaft(rc, newDurableFSM(n.cfg.FSM, n.lead, fsmWatches{applying: &n.applying, snapshotting: &n.snapshotting}), n.logs, n.stable, n.snaps, trans)
	if err != nil {
		_ = trans.Close()
		return fmt.Errorf("start raft: %w", err)
	}
	obs := raft.NewObserver(n.obsCh, false, nil)
	r.RegisterObserver(obs)
	n.mu.Lock()
	n.r, n.obs, n.trans = r, obs, trans
	n.mu.Unlock()
	n.running.Store(r)
	return nil
}

// stopRaft shuts the current raft down; the caller holds opMu. The mutex is
// not held across Shutdown: raft's goroutines call back into the node.
func (n *Node) stopRaft() error {
	n.mu.Lock()
	r, obs, trans := n.r, n.obs, n.trans
	n.r, n.obs, n.trans = nil, nil, nil
	n.mu.Unlock()
	n.running.Store(nil)
	if r == nil {
		return nil
	}
	r.DeregisterObserver(obs)
	f := r.Shutdown()
	// raft closes its transport only after its goroutines have stopped, and
	// a replication goroutine writing to a cut-off peer waits out the
	// transport's I/O timeout (10 s) first: that made an override finish
	// long after it was decided, sometimes after the partition had healed.
	// Closing the transport now ends those writes at once.
	if trans != nil {
		_ = trans.Close()
	}
	if err := f.Error(); err != nil {
		return fmt.Errorf("shut raft down: %w", err)
	}
	// Whoever opens the log next (a restarted raft, an override's
	// recovery) reads it from the store: finish what the leader queued.
	if err := n.lead.flush(); err != nil {
		return fmt.Errorf("shut raft down: %w", err)
	}
	return nil
}

// setRecovering marks raft as deliberately down (override, fence, rejoin)
// or back; raftOrErr tells callers which.
func (n *Node) setRecovering(on bool) {
	n.mu.Lock()
	n.recovering = on
	n.mu.Unlock()
}

func (n *Node) current() (*raft.Raft, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.r, n.recovering
}

func (n *Node) raftOrErr() (*raft.Raft, error) {
	r, recovering := n.current()
	if r == nil {
		if n.fenced.Load() {
			return nil, fmt.Errorf("%w while the heal hands this node's work over: %w", errFenced, ErrNotLeader)
		}
		if recovering {
			return nil, fmt.Errorf("raft is restarting for an override: %w", ErrNotLeader)
		}
		return nil, ErrShutdown
	}
	return r, nil
}

// idForAddr and isMember implement memberDirectory over the configured
// members plus the live configuration (servers an operator added).
func (n *Node) idForAddr(addr string) (string, bool) {
	for _, m := range n.cfg.Members {
		if m.RaftAddr == addr {
			return m.ID, true
		}
	}
	if r, _ := n.current(); r != nil {
		for _, s := range r.GetConfiguration().Configuration().Servers {
			if string(s.Address) == addr {
				return string(s.ID), true
			}
		}
	}
	return "", false
}

func (n *Node) isMember(id string) bool {
	if _, ok := n.cfg.member(id); ok {
		return true
	}
	if r, _ := n.current(); r != nil {
		for _, s := range r.GetConfiguration().Configuration().Servers {
			if string(s.ID) == id {
				return true
			}
		}
	}
	return false
}

func (n *Node) probeStatus() peerStatus {
	st := peerStatus{ID: n.cfg.NodeID, State: "Shutdown", Epoch: n.cfg.FSM.ClusterEpoch()}
	r, recovering := n.current()
	if recovering {
		st.State = "Recovering"
	}
	if r == nil {
		return st
	}
	st.State = r.State().String()
	st.Term = r.CurrentTerm()
	if n.leaving.Load() {
		st.State = leavingState
		return st
	}
	_, leader := r.LeaderWithID()
	st.Leader = string(leader)
	for _, s := range r.GetConfiguration().Configuration().Servers {
		if s.Suffrage == raft.Voter {
			st.Voters = append(st.Voters, string(s.ID))
		}
	}
	return st
}

// Role returns the node's role stream.
func (n *Node) Role() role.Source { return n.bc }

// Raft is the escape hatch to the underlying raft instance. It changes
// after an override; do not keep it.
func (n *Node) Raft() *raft.Raft {
	r, _ := n.current()
	return r
}

// Shutdown stops the loops, raft, the transport and the stores. The node
// publishes Detached first so workers stop before raft goes away.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutOnce.Do(func() {
		n.pubMu.Lock()
		n.cancel()
		cur := n.bc.Current()
		cur.Role, cur.Leader, cur.Electing = role.Detached, "", false
		n.bc.Publish(cur)
		n.pubMu.Unlock()
		done := make(chan error, 1)
		go func() {
			n.opMu.Lock()
			defer n.opMu.Unlock()
			err := n.stopRaft()
			n.wg.Wait()
			done <- errors.Join(err, n.closeStores())
		}()
		select {
		case n.shutErr = <-done:
		case <-ctx.Done():
			n.shutErr = fmt.Errorf("shutdown of node %s (still finishing in the background): %w", n.cfg.NodeID, ctx.Err())
		}
	})
	return n.shutErr
}

func (n *Node) closeStores() error {
	var errs []error
	if n.stream != nil {
		if err := n.stream.close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("close raft listener: %w", err))
		}
	} else if n.cfg.Listener != nil {
		_ = n.cfg.Listener.Close()
	}
	if n.store != nil {
		if err := n.closeLogStore(); err != nil {
			errs = append(errs, fmt.Errorf("close raft store: %w", err))
		}
	}
	return errors.Join(errs...)
}

// recoveryFSM keeps RecoverCluster from rewinding a persistent FSM that is
// already at or past the newest snapshot; RecoverCluster then replays only
// the entries the FSM has not applied (it skips the rest itself).
type recoveryFSM struct {
	FSM
	skipRestore bool
}

func (f recoveryFSM) Restore(rc io.ReadCloser) error {
	if f.skipRestore {
		return nil
	}
	return f.FSM.Restore(rc)
}

// sortedIDs is used for stable log output.
func sortedIDs(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}
