package fsm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/scadad/scadad/internal/boltsafe"
)

// Options configure Open.
type Options struct {
	Logger zerolog.Logger
	// NoSync skips fsync on every commit. Only for tests and benchmarks: a
	// power loss could corrupt the file.
	NoSync bool
	// DeferSync skips fsync on commits but keeps the file trustworthy: the
	// raft log (always synced) is the durable record and the state file is
	// derived from it. A marker beside the file names the OS boot that
	// wrote it; after a process crash the page cache still holds every
	// write and the file is used as it is, after an OS restart Open refuses
	// it with ErrUnsyncedState. Close syncs the file and removes the
	// marker. Without a boot id (BootID returns "") commits are synced.
	DeferSync bool
	// BootID identifies the running OS boot. Default DefaultBootID.
	BootID func() string
	// ReleasePages, when set, finds the memory maps of the state file at
	// path and returns what hands their resident pages back to the kernel.
	// It is called with the map held still, so the returned release may
	// unmap them, and may be called again for as long as the map stays
	// held. Every page a commit writes was first read through the map, so
	// the FSM releases after a commit once its commits have written
	// ReleaseEvery bytes of pages since the last release (default 8 MiB),
	// and FSM.ReleasePages releases on demand; a walk of the whole state
	// (snapshot, checkpoint, scrub) releases every walkReleaseBytes it
	// reads. The resident size then stays within that of the process's own
	// memory however fast entries are applied.
	ReleasePages func(path string) (release func() error, err error)
	ReleaseEvery int64
	// InitialMmapSize is bbolt's initial memory map size. While a snapshot
	// holds its read transaction (raft streams a multi-GB state for
	// seconds), a commit that must grow the map waits for it, and applies
	// wait behind that commit; a map larger than the file avoids it.
	// Default DefaultMmapSize.
	InitialMmapSize int
	// LockTimeout is how long Open waits for the file lock held by another
	// process. Default 5 s.
	LockTimeout time.Duration
	// CommitBytes, when positive, lets applied entries gather in one open
	// write transaction until their commands total this many bytes or the
	// caller calls Commit (on a timer of its own): one commit then writes
	// each page its entries touch once, not once per batch. Reads see
	// applied entries at once (short reads run in the open transaction),
	// and only the file lags, which is safe: the raft log holds every entry
	// the file lacks, and a restart replays them. Snapshot, Backup, Restore
	// and Close commit first, so the file never lags a snapshot raft may
	// compact its log to. Zero commits every batch.
	CommitBytes int
	// VerifyOnOpen runs the full check of the file (bbolt's consistency
	// check and a read of every byte) at Open. Open runs it anyway after an
	// unclean stop (a marker of DeferSync left from this boot); the size
	// check (no page beyond the end of the file) runs always.
	VerifyOnOpen bool
	// FeatureLevel is the highest FSM feature level this node applies; an
	// entry that needs more stops the applying (see ApplyBlocked). Zero
	// is the build's FeatureLevel; tests raise it to apply FeatureProbe.
	FeatureLevel Level
	// DigestCPUShare bounds a checkpoint's digest of the state to this
	// share of one core (0: unbounded).
	DigestCPUShare float64
}

func (o Options) featureLevel() Level {
	if o.FeatureLevel == 0 {
		return FeatureLevel
	}
	return o.FeatureLevel
}

func (o Options) bootID() string {
	if o.BootID == nil {
		return DefaultBootID()
	}
	return o.BootID()
}

func (o Options) boltOptions(readOnly bool) *bolt.Options {
	bo := &bolt.Options{
		Timeout:         o.LockTimeout,
		NoSync:          o.NoSync,
		InitialMmapSize: o.InitialMmapSize,
		ReadOnly:        readOnly,
		FreelistType:    bolt.FreelistMapType,
	}
	if bo.Timeout == 0 {
		bo.Timeout = 5 * time.Second
	}
	if bo.InitialMmapSize == 0 {
		bo.InitialMmapSize = DefaultMmapSize
	}
	return bo
}

// Meta is the FSM's own bookkeeping.
type Meta struct {
	AppliedIndex  uint64
	AppliedTerm   uint64
	ClusterEpoch  uint64
	SchemaVersion uint64
}

// FSM is the bbolt-backed replicated state machine. Apply, ApplyBatch and
// Restore are called by one goroutine (raft's FSM loop); the read methods may
// be called from any goroutine at any time.
type FSM struct {
	path string
	opts Options
	log  zerolog.Logger

	// mu guards db: readers and Apply hold it shared; Restore and Close
	// hold it exclusively while they swap or close the file.
	mu     sync.RWMutex
	db     *bolt.DB
	closed bool

	meta  atomic.Pointer[Meta]
	fatal atomic.Pointer[error]
	// blocked is the first entry this node could not apply for want of a
	// feature level; nothing after it is applied until a restart with a
	// newer build.
	blocked atomic.Pointer[BlockedError]
	// access is the access control as of meta's applied index, rebuilt
	// from the state whenever an entry changes it (Access).
	access atomic.Pointer[Access]
	// restores counts the snapshots swapped in since Open (see Restores).
	restores atomic.Uint64

	subsMu sync.Mutex
	subs   map[chan uint64]struct{}

	// deferred is Options.DeferSync in effect: commits are not synced and
	// the marker names this boot (decided once, at Open).
	deferred bool

	// txMu guards the open write transaction: entries applied but not yet
	// committed (Options.CommitBytes), and the command bytes they hold.
	// Taken after mu.
	txMu      sync.Mutex
	open      *bolt.Tx
	openBytes int

	// releasedAt is the page bytes written as of the last release after a
	// commit (guarded by txMu); releaseFailed says whether the last
	// release, after a commit or by ReleasePages, failed.
	releasedAt    int64
	releaseFailed atomic.Bool

	// digests carries this node's checkpoint digests out (LocalDigests);
	// bg counts the digests running, bgCtx ends them (Close, Restore).
	digests  chan LocalDigest
	bg       sync.WaitGroup
	bgCtx    context.Context
	bgCancel context.CancelFunc
}

var (
	_ raft.BatchingFSM = (*FSM)(nil)
	_ raft.FSM         = (*FSM)(nil)
)

// Open opens (creating if needed) the state file at path. It returns an
// error wrapping ErrUnsyncedState for a file left unsynced by an earlier
// OS boot (see Options.DeferSync).
func Open(path string, opts Options) (*FSM, error) {
	boot := opts.bootID()
	if err := checkUnsynced(path, boot); err != nil {
		return nil, err
	}
	_, markerErr := os.Stat(path + unsyncedSuffix)
	full := opts.VerifyOnOpen || markerErr == nil
	if err := boltsafe.Verify(context.Background(), path, boltsafe.Options{Full: full}); err != nil {
		return nil, damaged(path, err)
	}
	deferred := opts.DeferSync && !opts.NoSync && boot != ""
	if deferred {
		if err := markUnsynced(path, boot); err != nil {
			return nil, fmt.Errorf("open fsm state: %w", err)
		}
		opts.NoSync = true // bbolt's flag; the marker keeps the file trustworthy
	}
	f := &FSM{path: path, opts: opts, log: opts.Logger, subs: make(map[chan uint64]struct{}), deferred: deferred,
		digests: make(chan LocalDigest, 16)}
	f.bgCtx, f.bgCancel = context.WithCancel(context.Background())
	err := boltsafe.Guard(path, func() error {
		db, err := openDB(path, opts)
		if err != nil {
			return err
		}
		f.db = db
		if err := f.loadMeta(); err != nil {
			_ = db.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return nil, damaged(path, err)
	}
	m := f.Meta()
	f.log.Info().Str("path", path).Uint64("applied_index", m.AppliedIndex).
		Uint64("cluster_epoch", m.ClusterEpoch).Msg("fsm opened")
	return f, nil
}

func openDB(path string, opts Options) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, opts.boltOptions(false))
	if err != nil {
		return nil, fmt.Errorf("open fsm state %s: %w", path, err)
	}
	migrated := false
	err = db.Update(func(tx *bolt.Tx) error {
		if meta := tx.Bucket(bucketMeta); meta != nil {
			if v := getU64(meta.Get(metaSchema)); v > SchemaVersion {
				return newerSchemaError(path, v)
			}
			// A v0.1.0 file lacks the features bucket: adding it is the
			// whole migration, additive, so a v0.1.0 node still reads
			// the file (and a snapshot of it) and the schema stays 1.
			migrated = getU64(meta.Get(metaAppliedIndex)) > 0 && tx.Bucket(bucketFeatures) == nil
		}
		for _, name := range [][]byte{bucketMeta, bucketArtifacts, bucketDeploy, bucketSF, bucketAudit, bucketFeatures} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		sf := tx.Bucket(bucketSF)
		for _, name := range [][]byte{sfPending, sfParked, sfIDs, sfDelivered, sfDeliveredOrder, sfTargets} {
			if _, err := sf.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		if getU64(meta.Get(metaSchema)) == 0 {
			return meta.Put(metaSchema, u64(SchemaVersion))
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("initialise fsm state %s: %w", path, err)
	}
	if migrated {
		opts.Logger.Info().Str("path", path).Msg("state file of an earlier release migrated in place (features bucket added; schema version 1)")
	}
	return db, nil
}

// newerSchemaError refuses a state file written by a newer release.
func newerSchemaError(path string, v uint64) error {
	return fmt.Errorf("state file %s has schema version %d, written by a newer scadad; this build (FSM feature level %d, %s) reads schema 1..%d. "+
		"To go back to this release, restore the snapshot taken before the upgrade (scadactl snapshot restore, docs/upgrading.md), or run the newer release again",
		path, v, FeatureLevel, levelRelease(FeatureLevel), SchemaVersion)
}

func (f *FSM) loadMeta() error {
	var m Meta
	var acc *Access
	err := f.db.View(func(tx *bolt.Tx) error {
		m = readMeta(tx)
		var err error
		acc, err = readAccess(tx)
		return err
	})
	if err != nil {
		return fmt.Errorf("read fsm meta: %w", err)
	}
	f.meta.Store(&m)
	f.access.Store(acc)
	return nil
}

func readMeta(tx *bolt.Tx) Meta {
	b := tx.Bucket(bucketMeta)
	if b == nil {
		return Meta{}
	}
	return Meta{
		AppliedIndex:  getU64(b.Get(metaAppliedIndex)),
		AppliedTerm:   getU64(b.Get(metaAppliedTerm)),
		ClusterEpoch:  getU64(b.Get(metaClusterEpoch)),
		SchemaVersion: getU64(b.Get(metaSchema)),
	}
}

// Close closes the state file, syncing it first when commits were not
// synced (Options.DeferSync). Later calls return ErrClosed.
func (f *FSM) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	f.closed = true
	if f.db == nil {
		return nil
	}
	commitErr := f.commitLocked()
	var syncErr error
	if f.deferred {
		syncErr = f.db.Sync()
	}
	f.stopDigests()
	err := f.db.Close()
	f.db = nil
	if err == nil {
		err = errors.Join(commitErr, syncErr)
	}
	if err != nil {
		return fmt.Errorf("close fsm state: %w", err)
	}
	if f.deferred {
		// Synced: the next Open may trust the file whatever boot it runs in.
		return clearUnsynced(f.path)
	}
	return nil
}

// Path is the state file's path.
func (f *FSM) Path() string { return f.path }

// Meta returns the applied index, term, cluster epoch and schema version as
// of the last applied batch.
func (f *FSM) Meta() Meta { return *f.meta.Load() }

// ClusterEpoch returns the replicated cluster epoch.
func (f *FSM) ClusterEpoch() uint64 { return f.Meta().ClusterEpoch }

// Err returns the storage failure that stopped the FSM, or nil. After a
// storage failure every entry is refused with a *StorageError and the node
// must be restarted (it then replays from the stored applied index).
func (f *FSM) Err() error {
	if p := f.fatal.Load(); p != nil {
		return *p
	}
	return nil
}

// Restores is how many times a snapshot has replaced the state since Open.
// A reader that keeps a position in the state (a delivery cursor over the
// pending sequence) must start over when it changes: a restored state's
// counters can stand below positions the reader has passed, and what is
// enqueued after the restore reuses them.
func (f *FSM) Restores() uint64 { return f.restores.Load() }

// Changes returns a channel that receives the applied index after every
// applied batch and restore, coalesced (a slow reader sees only the newest),
// and a function that stops the subscription. It carries the current applied
// index at once.
func (f *FSM) Changes() (<-chan uint64, func()) {
	ch := make(chan uint64, 1)
	f.subsMu.Lock()
	f.subs[ch] = struct{}{}
	ch <- f.Meta().AppliedIndex
	f.subsMu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			f.subsMu.Lock()
			delete(f.subs, ch)
			f.subsMu.Unlock()
		})
	}
}

func (f *FSM) notify(index uint64) {
	f.subsMu.Lock()
	defer f.subsMu.Unlock()
	for ch := range f.subs {
		select {
		case <-ch:
		default:
		}
		ch <- index
	}
}

// Apply applies one entry; it returns *Result.
func (f *FSM) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies entries in one bbolt write transaction (kept open
// for later batches under Options.CommitBytes) and returns one *Result
// per entry. Entries at or below the stored applied index are skipped.
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	results := make([]*Result, len(logs))
	for i, l := range logs {
		results[i] = &Result{Index: l.Index}
		out[i] = results[i]
	}
	if len(logs) == 0 {
		return out
	}
	if err := f.Err(); err != nil {
		fail(results, err)
		return out
	}
	if b := f.blocked.Load(); b != nil {
		fail(results, b)
		return out
	}

	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		fail(results, &StorageError{Err: ErrClosed})
		return out
	}
	// A replay after restart: nothing new, no write transaction (no fsync).
	if logs[len(logs)-1].Index <= f.Meta().AppliedIndex {
		for _, r := range results {
			r.Skipped = true
		}
		return out
	}

	f.txMu.Lock()
	defer f.txMu.Unlock()
	old := f.meta.Load()
	newMeta := *old
	for rest, restRes := logs, results; len(rest) > 0; {
		m, accessChanged, done, checkpoint, err := f.applyOpen(rest, restRes)
		if err != nil {
			serr := &StorageError{Err: fmt.Errorf("apply entries %d..%d: %w", rest[0].Index, rest[len(rest)-1].Index, err)}
			f.storageFailure(serr)
			fail(restRes, serr)
			return out
		}
		newMeta = m
		published := m // readers keep what they loaded: a copy per store
		f.meta.Store(&published)
		if accessChanged {
			// Read from the open transaction, which holds what was just
			// applied; the entries' results already say what they did.
			if acc, err := readAccess(f.open); err == nil {
				f.access.Store(acc)
			} else {
				f.log.Error().Err(err).Msg("access control not reloaded after an applied change")
			}
		}
		if checkpoint != 0 {
			// The state at the checkpoint's index, committed, is what a
			// read transaction opened now sees.
			if err := f.commitOpen(); err != nil {
				fail(restRes[done:], err)
				break
			}
			f.startCheckpointDigest(checkpoint)
		}
		rest, restRes = rest[done:], restRes[done:]
	}
	if f.openBytes >= f.opts.CommitBytes {
		// A failure is recorded for the entries to come. These are
		// committed in the raft log, which the restart the failure demands
		// replays: their results already say what they do.
		_ = f.commitOpen()
	}
	if newMeta.AppliedIndex != old.AppliedIndex {
		f.notify(newMeta.AppliedIndex)
	}
	return out
}

// applyOpen applies logs in the open write transaction, beginning one if
// none is open. On failure the transaction is rolled back: the entries it
// held since the last commit are lost from the file, not from the raft
// log, and the storage failure makes the node replay them after restart.
// The caller holds f.mu shared and f.txMu.
//
// It stops after a Checkpoint entry, reporting its index, so the caller
// can commit and digest the state at it; done is how many of logs it took.
func (f *FSM) applyOpen(logs []*raft.Log, results []*Result) (m Meta, accessChanged bool, done int, checkpoint uint64, err error) {
	if f.open == nil {
		tx, err := f.db.Begin(true)
		if err != nil {
			return Meta{}, false, 0, 0, err
		}
		f.open = tx
	}
	done = len(logs)
	// A damaged page panics bbolt wherever a read reaches it: an error here,
	// so the node can rebuild its state instead of dying.
	var a *applier
	err = boltsafe.Guard(f.path, func() error {
		a = newApplier(f.open)
		a.have = f.opts.featureLevel()
		for i, l := range logs {
			if l.Index <= a.meta.AppliedIndex {
				results[i].Skipped = true
				continue
			}
			if l.Type == raft.LogCommand {
				if err := a.applyCommand(l, results[i]); err != nil {
					return err
				}
				if a.blocked != nil {
					// This entry and the rest wait for a newer build;
					// the applied index stays below this entry.
					fail(results[i:], a.blocked)
					break
				}
				f.openBytes += len(l.Data)
			}
			a.meta.AppliedIndex, a.meta.AppliedTerm = l.Index, l.Term
			if a.checkpointAt != 0 {
				done = i + 1
				break
			}
		}
		return a.flush()
	})
	if err == nil && a.blocked != nil {
		f.block(a.blocked)
	}
	if err != nil {
		tx := f.open
		_ = boltsafe.Guard(f.path, tx.Rollback)
		f.open, f.openBytes = nil, 0
		return Meta{}, false, 0, 0, damagedOr(f.path, err)
	}
	return a.meta, a.accessChanged, done, a.checkpointAt, nil
}

// Commit commits the entries applied since the last commit, if any. With
// Options.CommitBytes set the caller calls it on a timer; it bounds how far
// the file lags the applied state.
func (f *FSM) Commit() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		return ErrClosed
	}
	return f.commitLocked()
}

// commitOpen commits the open write transaction, if any, and releases
// mapped pages when due. A failed commit is a storage failure: the
// entries are lost from the file (not from the raft log) and the node
// refuses further entries until it is restarted. The caller holds f.mu
// (shared or exclusive) and f.txMu.
func (f *FSM) commitOpen() error {
	if f.open == nil {
		return nil
	}
	tx := f.open
	f.open, f.openBytes = nil, 0
	if err := boltsafe.Guard(f.path, tx.Commit); err != nil {
		// A commit that panicked left the transaction (and bbolt's writer
		// lock) open.
		_ = boltsafe.Guard(f.path, tx.Rollback)
		serr := &StorageError{Err: fmt.Errorf("commit entries up to %d: %w", f.Meta().AppliedIndex, damagedOr(f.path, err))}
		f.storageFailure(serr)
		return serr
	}
	f.maybeReleasePages()
	return nil
}

// storageFailure records the first storage failure; every later entry is
// refused with it.
func (f *FSM) storageFailure(serr *StorageError) {
	var e error = serr
	if f.fatal.CompareAndSwap(nil, &e) {
		f.log.Error().Err(serr).Msg("fsm storage failure: refusing further entries; restart the node")
	}
}

// block records that applying stopped at an entry above this node's
// feature level.
func (f *FSM) block(b *BlockedError) {
	if f.blocked.CompareAndSwap(nil, b) {
		f.log.Error().Uint64("index", b.Index).Uint32("needs_level", uint32(b.Need)).Uint32("level", uint32(b.Have)).
			Str("needs_release", b.NeedsRelease).Msg(b.Error())
	}
}

// ApplyBlocked returns the entry applying stopped at because this node
// cannot apply its feature level, or nil. The node keeps its raft log (it
// still stores and votes) but applies nothing more, takes no snapshot, and
// must not act on its state: restarted with a release that applies the
// level, it applies the entry and everything after it.
func (f *FSM) ApplyBlocked() *BlockedError { return f.blocked.Load() }

// maybeReleasePages calls Options.ReleasePages once the commits since the
// last call have written ReleaseEvery bytes of pages. The caller holds
// f.mu and f.txMu.
func (f *FSM) maybeReleasePages() {
	if f.opts.ReleasePages == nil {
		return
	}
	every := f.opts.ReleaseEvery
	if every <= 0 {
		every = 8 << 20
	}
	stats := f.db.Stats()
	written := stats.TxStats.GetPageAlloc()
	if written < f.releasedAt { // a restore swapped the file in
		f.releasedAt = written
	}
	if written-f.releasedAt < every {
		return
	}
	f.releasedAt = written
	f.releasePages()
}

// ReleasePages hands the state file's mapped pages back now, through
// Options.ReleasePages (nothing without it). Commits do so as they go;
// this is for a caller on a timer, to catch what readers touched.
func (f *FSM) ReleasePages() {
	f.mu.RLock()
	defer f.mu.RUnlock()
	f.releasePages()
}

// releasePages calls Options.ReleasePages with the map held still and logs
// the first failure and the recovery. The caller holds f.mu shared.
func (f *FSM) releasePages() {
	release := f.handBack() // notes its own outcome
	if release == nil {
		return
	}
	if err := f.withStableMap(func(string) error { release(); return nil }); err != nil {
		f.noteRelease(err)
	}
}

// handBack returns what a walk of the whole state file calls, from one
// goroutine at a time, to hand back the pages it has read through the map
// (nil without Options.ReleasePages). Every page a walk reads stays
// resident until released, and the kernel maps the cached neighbours of
// each page read with it: without this a walk of a multi-GB file added up
// to the whole file to the resident size before the daemon's timer
// released it. The map is found at the first call, which the walk makes
// while its read transaction holds the map still; the walk keeps it held
// until its last call, so later calls only release.
func (f *FSM) handBack() func() {
	if f.opts.ReleasePages == nil {
		return nil
	}
	var release func() error
	return func() {
		var err error
		if release == nil {
			if release, err = f.opts.ReleasePages(f.path); err != nil {
				release = nil
			}
		}
		if err == nil {
			err = release()
		}
		f.noteRelease(err)
	}
}

// noteRelease logs the first failure to release pages and the recovery.
func (f *FSM) noteRelease(err error) {
	switch {
	case err != nil && !f.releaseFailed.Load():
		f.log.Warn().Err(err).Msg("cannot release the state file's mapped pages; the resident size will include them")
	case err == nil && f.releaseFailed.Load():
		f.log.Info().Msg("releasing the state file's mapped pages again")
	}
	f.releaseFailed.Store(err != nil)
}

func fail(results []*Result, err error) {
	for _, r := range results {
		*r = Result{Index: r.Index, Err: err}
	}
}

// view runs fn on the applied state: in the open write transaction while
// one holds entries not yet committed (applies wait meanwhile, so fn must
// be short and must not write), else in a read transaction.
func (f *FSM) view(fn func(tx *bolt.Tx) error) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		return ErrClosed
	}
	f.txMu.Lock()
	if f.open != nil {
		defer f.txMu.Unlock()
		return f.readGuarded(func() error { return fn(f.open) })
	}
	f.txMu.Unlock()
	return f.readGuarded(func() error { return f.db.View(fn) })
}

// readGuarded runs a read; a damaged page bbolt panics or faults on is the
// FSM's storage failure (ErrDamagedState): applies stop, and the node
// rebuilds its state from the cluster.
func (f *FSM) readGuarded(read func() error) error {
	err := boltsafe.Guard(f.path, read)
	if errors.Is(err, boltsafe.ErrDamaged) {
		serr := &StorageError{Err: fmt.Errorf("read state: %w", damagedOr(f.path, err))}
		f.storageFailure(serr)
		return serr
	}
	return err
}

// viewCommitted commits the applied entries, then runs fn in a read
// transaction: for reads too long to hold up applies.
func (f *FSM) viewCommitted(fn func(tx *bolt.Tx) error) error {
	return f.readGuarded(func() error { return f.viewCommittedRaw(fn) })
}

// viewCommittedRaw is viewCommitted without the read guard.
func (f *FSM) viewCommittedRaw(fn func(tx *bolt.Tx) error) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		return ErrClosed
	}
	if err := f.commitLocked(); err != nil {
		return err
	}
	return f.db.View(fn)
}

// commitLocked is Commit for a caller holding f.mu.
func (f *FSM) commitLocked() error {
	f.txMu.Lock()
	defer f.txMu.Unlock()
	return f.commitOpen()
}

// removeIfExists deletes a leftover file, ignoring "not there".
func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// withStableMap calls fn with the state file's path while bbolt's memory
// map of it cannot be moved or unmapped: bbolt remaps only when no read
// transaction is open, and one is held around fn. Commits go on meanwhile.
// The caller holds f.mu shared (so no restore swaps the file).
func (f *FSM) withStableMap(fn func(path string) error) error {
	if f.closed || f.db == nil {
		return ErrClosed
	}
	tx, err := f.db.Begin(false)
	if err != nil {
		return fmt.Errorf("hold the state file's map: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	return fn(f.path)
}
