package raftnode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

// LeaderWrite says when the leader writes its own copy of new entries.
type LeaderWrite string

const (
	// LeaderWriteParallel writes the leader's copy while the entries are
	// replicated: raft's leader loop hands the entries over and goes on
	// to replicate them at once, and a background writer appends and
	// fsyncs them. An entry still counts as committed only once two disks
	// hold it (see parallelLog).
	LeaderWriteParallel LeaderWrite = "parallel"
	// LeaderWriteSequential is hashicorp/raft's own order: the leader's
	// append and fsync finish before replication starts.
	LeaderWriteSequential LeaderWrite = "sequential"
)

// errLogClosed ends the waits of a parallelLog that has been closed.
var errLogClosed = errors.New("raft log store closed")

// parallelLog is the raft log store of a node, letting a leader replicate
// entries while its own copy is still being written.
//
// hashicorp/raft's leader appends new entries to its log (append and
// fsync) and only then wakes its replication goroutines, so one entry
// costs the leader's fsync plus the follower's round trip and fsync, one
// after the other. Here the leader's StoreLogs only queues the entries
// (GetLog serves them from memory at once) and a background writer
// appends them with one StoreLogs call, and one fsync, for everything
// queued meanwhile.
//
// Raft counts the leader's own copy as soon as StoreLogs returns, so two
// gates keep "committed" meaning "on two disks" and "applied" meaning
// "on this node's disk":
//   - the leader's transport holds a follower's successful answer to an
//     AppendEntries until the leader's own copy of what it carried is
//     synced (noPipelineTransport.AppendEntries): a commit needs a
//     follower's answer, so it needs the leader's disk too;
//   - the FSM gets an entry only once this node's copy is synced
//     (durableFSM): nothing is applied, answered or checkpointed into the
//     state file from an entry that a crash of this node could take back.
//
// Only a leader with at least one other voter writes in parallel
// (Config's parallel func); every other write (a follower's append, a
// lone voter's, the bootstrap, a recovery) waits for whatever is queued and then
// is written before StoreLogs returns, as a follower's answer promises.
type parallelLog struct {
	store    logStableStore
	parallel func() bool // whether this write may be queued (leader, other voters)
	log      zerolog.Logger
	watch    *storageWatch // the write to store in progress, for StorageStalled (nil: none)

	mu          sync.Mutex
	queued      []*raft.Log   // accepted, not yet synced, in index order
	queuedBytes int           // the queued entries' data
	writing     bool          // the background writer is running
	err         error         // the background writer's failure; every write fails from then on
	closed      bool          // Close ran; waits end
	changed     chan struct{} // closed and replaced whenever synced, err or closed changes

	synced atomic.Uint64 // every entry up to it that this store accepted is on disk
}

// maxQueuedBytes bounds what a leader queues ahead of its disk. Past it,
// StoreLogs waits for the writer as hashicorp/raft's leader waits for its
// own append: the leader loop stops taking new entries, and Apply pushes
// back on the clients, rather than the queue growing while a disk stalls.
const maxQueuedBytes = 16 << 20

func newParallelLog(store logStableStore, parallel func() bool, log zerolog.Logger, watch *storageWatch) (*parallelLog, error) {
	last, err := store.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("read the raft log's last index: %w", err)
	}
	p := &parallelLog{store: store, parallel: parallel, log: log, watch: watch, changed: make(chan struct{})}
	p.synced.Store(last)
	return p, nil
}

// signalLocked wakes the waiters; the caller holds mu.
func (p *parallelLog) signalLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// awaitChangeLocked releases mu until the next signal; the caller holds
// mu and holds it again on return.
func (p *parallelLog) awaitChangeLocked() {
	ch := p.changed
	p.mu.Unlock()
	<-ch
	p.mu.Lock()
}

// waitSynced returns once every entry up to index is on this node's disk,
// or the writer failed, or the store closed, or ctx ended.
func (p *parallelLog) waitSynced(ctx context.Context, index uint64) error {
	for {
		if p.synced.Load() >= index {
			return nil
		}
		p.mu.Lock()
		if p.synced.Load() >= index {
			p.mu.Unlock()
			return nil
		}
		err, closed, ch := p.err, p.closed, p.changed
		p.mu.Unlock()
		switch {
		case err != nil:
			return fmt.Errorf("raft log entry %d was not written: %w", index, err)
		case closed:
			return fmt.Errorf("raft log entry %d: %w", index, errLogClosed)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for raft log entry %d to reach the disk: %w", index, ctx.Err())
		}
	}
}

// failure is the background writer's failure, or nil.
func (p *parallelLog) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// flush returns once nothing is queued or being written.
func (p *parallelLog) flush() error {
	p.mu.Lock()
	for p.writing {
		p.awaitChangeLocked()
	}
	err := p.err
	p.mu.Unlock()
	return err
}

// Close waits for the queued entries to be written and ends every wait.
func (p *parallelLog) Close() error {
	err := p.flush()
	p.mu.Lock()
	p.closed = true
	p.signalLocked()
	p.mu.Unlock()
	return err
}

func (p *parallelLog) StoreLog(l *raft.Log) error {
	return p.StoreLogs([]*raft.Log{l})
}

func (p *parallelLog) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	if p.parallel() {
		p.mu.Lock()
		for p.queuedBytes >= maxQueuedBytes && p.err == nil {
			p.awaitChangeLocked()
		}
		if err := p.err; err != nil {
			p.mu.Unlock()
			return fmt.Errorf("raft log: an earlier write failed: %w", err)
		}
		p.queued = append(p.queued, logs...)
		p.queuedBytes += dataBytes(logs)
		if !p.writing {
			p.writing = true
			go p.write()
		}
		p.mu.Unlock()
		return nil
	}
	if err := p.flush(); err != nil {
		return fmt.Errorf("raft log: an earlier write failed: %w", err)
	}
	if err := p.storeWatched(logs); err != nil {
		return err
	}
	p.mu.Lock()
	p.synced.Store(logs[len(logs)-1].Index)
	p.signalLocked()
	p.mu.Unlock()
	return nil
}

// write appends what is queued, one StoreLogs (one fsync) for everything
// queued since the last one, until the queue is empty.
func (p *parallelLog) write() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.queued) > 0 {
		batch := p.queued
		p.mu.Unlock()
		err := p.storeWatched(batch)
		p.mu.Lock()
		if err != nil {
			// Raft believes these entries are stored; they are not, and a
			// later append after them would leave a hole. Every write fails
			// from now on (raft steps down) and the waits for them end with
			// the error, so nothing after the failure is counted anywhere.
			p.err = err
			p.queued, p.queuedBytes = nil, 0
			p.log.Error().Err(err).Uint64("first_index", batch[0].Index).Uint64("last_index", batch[len(batch)-1].Index).
				Msg("cannot write the raft log: this node writes no more entries until it is restarted (scadad stops so the service manager restarts it); as leader it steps down at its next entry")
			break
		}
		p.queued = p.queued[len(batch):]
		p.queuedBytes -= dataBytes(batch)
		p.synced.Store(batch[len(batch)-1].Index)
		p.signalLocked()
	}
	if len(p.queued) == 0 {
		p.queued = nil // let the array go
	}
	p.writing = false
	p.signalLocked()
}

// storeWatched writes logs to the store, recorded in watch while it runs.
func (p *parallelLog) storeWatched(logs []*raft.Log) error {
	p.watch.begin(logs[len(logs)-1].Index)
	defer p.watch.end()
	return p.store.StoreLogs(logs)
}

func dataBytes(logs []*raft.Log) int {
	n := 0
	for _, l := range logs {
		n += len(l.Data)
	}
	return n
}

// queuedLocked returns the queued entry at index; the caller holds mu.
func (p *parallelLog) queuedLocked(index uint64) (*raft.Log, bool) {
	if len(p.queued) == 0 {
		return nil, false
	}
	first := p.queued[0].Index
	if index < first || index-first >= uint64(len(p.queued)) {
		return nil, false
	}
	return p.queued[index-first], true
}

func (p *parallelLog) GetLog(index uint64, out *raft.Log) error {
	p.mu.Lock()
	l, ok := p.queuedLocked(index)
	if ok {
		*out = *l
	}
	p.mu.Unlock()
	if ok {
		return nil
	}
	return p.store.GetLog(index, out)
}

func (p *parallelLog) FirstIndex() (uint64, error) {
	first, err := p.store.FirstIndex()
	if err != nil || first != 0 {
		return first, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queued) > 0 {
		return p.queued[0].Index, nil
	}
	return 0, nil
}

func (p *parallelLog) LastIndex() (uint64, error) {
	p.mu.Lock()
	if n := len(p.queued); n > 0 {
		last := p.queued[n-1].Index
		p.mu.Unlock()
		return last, nil
	}
	p.mu.Unlock()
	return p.store.LastIndex()
}

// DeleteRange deletes from the store. A compaction (everything at or
// below what is synced) runs beside the writer; a deletion reaching the
// queued entries (a follower dropping a conflicting tail) waits for them
// to be written first.
func (p *parallelLog) DeleteRange(first, last uint64) error {
	if last > p.synced.Load() {
		if err := p.flush(); err != nil {
			return fmt.Errorf("raft log: an earlier write failed: %w", err)
		}
	}
	if err := p.store.DeleteRange(first, last); err != nil {
		return err
	}
	p.mu.Lock()
	if first <= p.synced.Load() && last >= p.synced.Load() {
		p.synced.Store(first - 1)
	}
	p.mu.Unlock()
	return nil
}

// IsMonotonic passes the store's answer on: raft-wal cannot leave a gap,
// so raft deletes its whole log when it installs a snapshot.
func (p *parallelLog) IsMonotonic() bool {
	m, ok := p.store.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// durableFSM hands raft's entries to the FSM only once this node's own
// copy of them is synced (see parallelLog).
type durableFSM struct {
	FSM
	log     *parallelLog
	watches fsmWatches
}

// fsmWatches record the calls into the FSM that write its state file, for
// StorageStalled.
type fsmWatches struct {
	applying, snapshotting *storageWatch
}

// durableBatchingFSM is durableFSM for an FSM that applies in batches.
type durableBatchingFSM struct {
	durableFSM
	batch raft.BatchingFSM
}

// newDurableFSM wraps fsm, keeping raft's view of whether it batches.
func newDurableFSM(fsm FSM, log *parallelLog, watches fsmWatches) raft.FSM {
	d := durableFSM{FSM: fsm, log: log, watches: watches}
	if b, ok := fsm.(raft.BatchingFSM); ok {
		return durableBatchingFSM{durableFSM: d, batch: b}
	}
	return d
}

// waitSynced waits without a deadline: raft's FSM goroutine must not
// apply an entry this node could lose. It ends when the write is done,
// failed or the store closed; after a failure raft has stepped down and
// the entry is applied as committed elsewhere, the node's own log being
// the one that is wrong (its next start reads what is on disk).
func (d durableFSM) waitSynced(index uint64) {
	_ = d.log.waitSynced(context.Background(), index)
}

func (d durableFSM) Apply(l *raft.Log) interface{} {
	d.watches.applying.begin(l.Index)
	defer d.watches.applying.end()
	d.waitSynced(l.Index)
	return d.FSM.Apply(l)
}

// Snapshot commits the FSM's held write transaction (fsm.FSM's
// OpenSnapshot) on raft's FSM goroutine, as an apply does.
func (d durableFSM) Snapshot() (raft.FSMSnapshot, error) {
	d.watches.snapshotting.begin(0)
	defer d.watches.snapshotting.end()
	return d.FSM.Snapshot()
}

func (d durableBatchingFSM) ApplyBatch(logs []*raft.Log) []interface{} {
	if len(logs) == 0 {
		return d.batch.ApplyBatch(logs)
	}
	d.watches.applying.begin(logs[len(logs)-1].Index)
	defer d.watches.applying.end()
	d.waitSynced(logs[len(logs)-1].Index)
	return d.batch.ApplyBatch(logs)
}
