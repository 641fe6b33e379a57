package fsm

import (
	"context"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/boltsafe"
)

// A checkpoint compares the nodes' states at one log index. The leader
// proposes a Checkpoint naming the voters; every node that applies it
// commits its state as of that entry and digests it from a read
// transaction opened right after the commit (exactly that index, off the
// apply path), and proposes a CheckpointReport with the digest. Each
// report is applied like any entry, so every node holds the same reports
// and reaches the same verdict: a digest held by a majority of the voters
// is the state's, and a voter that reported another has diverged. With two
// voters (pair mode) disagreeing there is no majority: the verdict is a
// split, and the operator chooses (scadactl check).

// bucketCheckpoints holds the last CheckpointsKept checkpoint records by
// index. New in v0.2.0 (feature level 2); created by the first checkpoint.
var bucketCheckpoints = []byte("checkpoints")

// CheckpointsKept is how many checkpoint records the state keeps.
const CheckpointsKept = 16

// maxCheckpointVoters bounds a checkpoint's voter list.
const maxCheckpointVoters = 16

// CheckpointOutcome answers Checkpoint and CheckpointReport.
type CheckpointOutcome struct {
	Record *fsmpb.CheckpointRecord
}

// LocalDigest is this node's digest of its state at a checkpoint (Err set
// when it could not be computed: the state could not be read whole).
type LocalDigest struct {
	Index  uint64
	Digest string
	Err    error
}

func (a *applier) checkpoint(c *fsmpb.Checkpoint, res *Result) error {
	if len(c.Voters) == 0 || len(c.Voters) > maxCheckpointVoters {
		res.Err = cmdErr(CodeInvalid, "a checkpoint names 1..%d voters, got %d", maxCheckpointVoters, len(c.Voters))
		return nil
	}
	for i, v := range c.Voters {
		if e := checkID("checkpoint voter", v); e != nil {
			res.Err = e
			return nil
		}
		if slices.Contains(c.Voters[:i], v) {
			res.Err = cmdErr(CodeInvalid, "checkpoint voter %q listed twice", v)
			return nil
		}
	}
	if e := checkText("checkpoint reason", c.Reason, MaxTextBytes); e != nil {
		res.Err = e
		return nil
	}
	b, err := a.tx.CreateBucketIfNotExists(bucketCheckpoints)
	if err != nil {
		return fmt.Errorf("create checkpoints bucket: %w", err)
	}
	rec := &fsmpb.CheckpointRecord{Index: a.index, StampUnixNano: a.cmd.StampUnixNano, Actor: a.cmd.Actor,
		Reason: c.Reason, Voters: slices.Clone(c.Voters)}
	if err := a.putRecord(b, u64(a.index), rec); err != nil {
		return fmt.Errorf("store checkpoint %d: %w", a.index, err)
	}
	// Keep the newest CheckpointsKept (keys are big-endian indexes).
	n := 0
	cur := b.Cursor()
	for k, _ := cur.First(); k != nil; k, _ = cur.Next() {
		n++
	}
	for ; n > CheckpointsKept; n-- {
		k, _ := b.Cursor().First()
		if err := b.Delete(k); err != nil {
			return fmt.Errorf("prune checkpoint: %w", err)
		}
	}
	a.checkpointAt = a.index
	res.Checkpoint = &CheckpointOutcome{Record: rec}
	return nil
}

func (a *applier) checkpointReport(c *fsmpb.CheckpointReport, res *Result) error {
	if e := firstErr(checkID("node id", c.NodeId), checkSHA(c.Digest)); e != nil {
		res.Err = e
		return nil
	}
	b := a.tx.Bucket(bucketCheckpoints)
	if b == nil {
		res.Err = cmdErr(CodeUnknown, "no checkpoint at index %d", c.Index)
		return nil
	}
	rec := &fsmpb.CheckpointRecord{}
	ok, err := getRecord(b, u64(c.Index), rec)
	if err != nil {
		return err
	}
	if !ok {
		res.Err = cmdErr(CodeUnknown, "no checkpoint at index %d (unknown or no longer kept)", c.Index)
		return nil
	}
	if !slices.Contains(rec.Voters, c.NodeId) {
		res.Err = cmdErr(CodeInvalid, "node %q is not a voter of checkpoint %d", c.NodeId, c.Index)
		return nil
	}
	// The record keeps what the checkpoint found: a node's first report
	// stands. A node rebuilt after this checkpoint's verdict replays the
	// checkpoint and reports again, healthy now; replacing its report would
	// erase the divergence from `scadactl check` the moment the rebuild
	// finished. The newer checkpoints say it is whole again.
	if slices.ContainsFunc(rec.Reports, func(r *fsmpb.CheckpointDigest) bool { return r.NodeId == c.NodeId }) {
		res.Checkpoint = &CheckpointOutcome{Record: rec}
		return nil
	}
	addReport(rec, &fsmpb.CheckpointDigest{NodeId: c.NodeId, Digest: c.Digest, StampUnixNano: a.cmd.StampUnixNano})
	judge(rec)
	if err := a.putRecord(b, u64(c.Index), rec); err != nil {
		return fmt.Errorf("store checkpoint %d: %w", c.Index, err)
	}
	res.Checkpoint = &CheckpointOutcome{Record: rec}
	return nil
}

// addReport puts d in rec's reports, in the voters' order.
func addReport(rec *fsmpb.CheckpointRecord, d *fsmpb.CheckpointDigest) {
	var out []*fsmpb.CheckpointDigest
	for _, v := range rec.Voters {
		if v == d.NodeId {
			out = append(out, d)
			continue
		}
		for _, r := range rec.Reports {
			if r.NodeId == v {
				out = append(out, r)
			}
		}
	}
	rec.Reports = out
}

// judge sets rec's verdict from its reports: the digest a majority of the
// voters reported, the voters that reported another, and whether every
// voter reported and none has a majority (a split: two voters disagreeing).
func judge(rec *fsmpb.CheckpointRecord) {
	need := len(rec.Voters)/2 + 1
	rec.MajorityDigest, rec.Diverged, rec.Split = "", nil, false
	for _, r := range rec.Reports {
		n := 0
		for _, o := range rec.Reports {
			if o.Digest == r.Digest {
				n++
			}
		}
		if n >= need {
			rec.MajorityDigest = r.Digest
			break
		}
	}
	if rec.MajorityDigest == "" {
		rec.Split = len(rec.Reports) == len(rec.Voters) && len(rec.Reports) > 1
		return
	}
	for _, r := range rec.Reports {
		if r.Digest != rec.MajorityDigest {
			rec.Diverged = append(rec.Diverged, r.NodeId)
		}
	}
}

// Checkpoints returns the checkpoint records the state keeps, newest first.
func (f *FSM) Checkpoints() ([]*fsmpb.CheckpointRecord, error) {
	var out []*fsmpb.CheckpointRecord
	err := f.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCheckpoints)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			rec := &fsmpb.CheckpointRecord{}
			if err := unmarshalStored(v, rec); err != nil {
				return fmt.Errorf("checkpoint %x: %w", k, err)
			}
			out = append(out, rec)
		}
		return nil
	})
	return out, err
}

// LocalDigests delivers this node's digest at each checkpoint it applies,
// once computed. A digest not taken before the next 16 are ready is
// dropped (its checkpoint gets no report from this node).
func (f *FSM) LocalDigests() <-chan LocalDigest { return f.digests }

// startCheckpointDigest digests the committed state, which is exactly the
// state at index (the caller holds f.mu shared and f.txMu, and has just
// committed the checkpoint entry), in a goroutine of its own: a read
// transaction opened now sees that state however far applies go on.
// Close and Restore end it (bgCtx) and wait for it.
func (f *FSM) startCheckpointDigest(index uint64) {
	var tx *bolt.Tx
	err := boltsafe.Guard(f.path, func() error {
		var err error
		tx, err = f.db.Begin(false)
		return err
	})
	if err != nil {
		f.sendDigest(LocalDigest{Index: index, Err: damagedOr(f.path, fmt.Errorf("checkpoint %d: begin read: %w", index, err))})
		return
	}
	ctx := f.bgCtx
	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		var sum string
		err := boltsafe.Guard(f.path, func() error {
			var err error
			sum, err = digestTxCtx(ctx, tx, f.opts.DigestCPUShare, f.handBack())
			return err
		})
		_ = boltsafe.Guard(f.path, tx.Rollback)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			f.sendDigest(LocalDigest{Index: index, Err: damagedOr(f.path, fmt.Errorf("checkpoint %d: digest: %w", index, err))})
			return
		}
		f.sendDigest(LocalDigest{Index: index, Digest: sum})
	}()
}

func (f *FSM) sendDigest(d LocalDigest) {
	select {
	case f.digests <- d:
	default:
		f.log.Warn().Uint64("checkpoint", d.Index).Msg("checkpoint digest dropped: nobody took the last 16")
	}
}

// stopDigests ends the checkpoint digests in progress and waits for them;
// the caller holds f.mu exclusively, before closing or swapping the file.
func (f *FSM) stopDigests() {
	f.bgCancel()
	f.bg.Wait()
	f.bgCtx, f.bgCancel = context.WithCancel(context.Background())
}
