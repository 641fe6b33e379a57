package fsm

import (
	"bytes"
	"fmt"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/scadad/scadad/fsm/fsmpb"
)

// applier carries one bbolt write transaction through a batch of entries.
// Handlers set res.Err to a *CommandError for deterministic refusals (after
// checking everything, before writing anything) and return an error only for
// storage failures, which abort the whole batch.
type applier struct {
	tx   *bolt.Tx
	meta Meta

	auditSeq     uint64
	deliveredSeq uint64

	metaB, artifacts, deploy, audit, features                      *bolt.Bucket
	pending, parked, ids, delivered, deliveredOrder, targetsBucket *bolt.Bucket

	// idsAt and deliveredAt look ids up (seen); kept for the batch so each
	// lookup reuses its cursor's path instead of allocating a new one.
	idsAt, deliveredAt *bolt.Cursor

	// counters caches the TargetCounters touched in this batch; they are
	// written once, in flush.
	counters map[string]*fsmpb.TargetCounters

	// arena holds the records marshalled in this batch (take).
	arena []byte

	// the entry being applied
	index uint64
	cmd   *fsmpb.Command

	// have is the highest feature level this node applies; blocked is set
	// by the first entry that needs more, and nothing after it is applied.
	have    Level
	blocked *BlockedError
	// accessChanged says an entry of the batch changed the access control.
	accessChanged bool
	// checkpointAt is the index of a Checkpoint entry just applied: the
	// batch stops after it so the state at that index can be committed
	// and digested.
	checkpointAt uint64
}

func newApplier(tx *bolt.Tx) *applier {
	sf := tx.Bucket(bucketSF)
	a := &applier{
		tx:             tx,
		meta:           readMeta(tx),
		metaB:          tx.Bucket(bucketMeta),
		artifacts:      tx.Bucket(bucketArtifacts),
		deploy:         tx.Bucket(bucketDeploy),
		audit:          tx.Bucket(bucketAudit),
		features:       tx.Bucket(bucketFeatures),
		pending:        sf.Bucket(sfPending),
		parked:         sf.Bucket(sfParked),
		ids:            sf.Bucket(sfIDs),
		delivered:      sf.Bucket(sfDelivered),
		deliveredOrder: sf.Bucket(sfDeliveredOrder),
		targetsBucket:  sf.Bucket(sfTargets),
		counters:       make(map[string]*fsmpb.TargetCounters),
	}
	a.auditSeq = getU64(a.metaB.Get(metaAuditSeq))
	a.deliveredSeq = getU64(a.metaB.Get(metaDeliveredSeq))
	// Sequential keys: fill pages fully instead of splitting them in half.
	a.audit.FillPercent = 0.95
	a.deliveredOrder.FillPercent = 0.95
	return a
}

// seen reports whether id is stored: pending, parked, or among the
// recently delivered or discarded.
func (a *applier) seen(id []byte) bool {
	if a.idsAt == nil {
		a.idsAt, a.deliveredAt = a.ids.Cursor(), a.delivered.Cursor()
	}
	return has(a.idsAt, id) || has(a.deliveredAt, id)
}

// has reports whether c's bucket holds key. Seek positions the cursor
// afresh, so it is right after any change made to the bucket since.
func has(c *bolt.Cursor, key []byte) bool {
	k, _ := c.Seek(key)
	return k != nil && bytes.Equal(k, key)
}

// flush writes the batch's bookkeeping: counters in key order, then meta.
func (a *applier) flush() error {
	for _, name := range sortedKeys(a.counters) {
		if err := a.putRecord(a.targetsBucket, []byte(name), a.counters[name]); err != nil {
			return fmt.Errorf("store counters of target %q: %w", name, err)
		}
	}
	puts := []struct {
		key []byte
		val uint64
	}{
		{metaAppliedIndex, a.meta.AppliedIndex},
		{metaAppliedTerm, a.meta.AppliedTerm},
		{metaClusterEpoch, a.meta.ClusterEpoch},
		{metaAuditSeq, a.auditSeq},
		{metaDeliveredSeq, a.deliveredSeq},
	}
	for _, p := range puts {
		if err := a.metaB.Put(p.key, u64(p.val)); err != nil {
			return fmt.Errorf("store meta %s: %w", p.key, err)
		}
	}
	return nil
}

func (a *applier) applyCommand(l *raft.Log, res *Result) error {
	cmd, cerr := unmarshalCommand(l.Data)
	if cerr != nil {
		res.Err = cerr
		return nil
	}
	// Before anything else: an entry this node cannot apply must not be
	// refused as unknown (the nodes that know it apply it) but wait.
	if b := blockOf(l.Index, cmd, a.have); b != nil {
		a.blocked = b
		res.Err = b
		return nil
	}
	if cerr := checkDecoded(cmd); cerr != nil {
		res.Err = cerr
		return nil
	}
	if cerr := validateEnvelope(cmd); cerr != nil {
		res.Err = cerr
		return nil
	}
	a.index, a.cmd = l.Index, cmd
	switch body := cmd.Body.(type) {
	case *fsmpb.Command_Noop:
		return nil
	case *fsmpb.Command_PutArtifactChunk:
		return a.putArtifactChunk(body.PutArtifactChunk, res)
	case *fsmpb.Command_CommitArtifact:
		return a.commitArtifact(body.CommitArtifact, res)
	case *fsmpb.Command_Deploy:
		return a.deployArtifact(body.Deploy, res)
	case *fsmpb.Command_DeployAck:
		return a.deployAck(body.DeployAck, res)
	case *fsmpb.Command_SfEnqueue:
		return a.sfEnqueue(body.SfEnqueue, res)
	case *fsmpb.Command_SfDelivered:
		return a.sfDelivered(body.SfDelivered, res)
	case *fsmpb.Command_SfPark:
		return a.sfPark(body.SfPark, res)
	case *fsmpb.Command_SfRetry:
		return a.sfRetry(body.SfRetry, res)
	case *fsmpb.Command_SfDiscard:
		return a.sfDiscard(body.SfDiscard, res)
	case *fsmpb.Command_SfAttempts:
		return a.sfAttempts(body.SfAttempts, res)
	case *fsmpb.Command_SfBirth:
		return a.sfBirth(body.SfBirth, res)
	case *fsmpb.Command_Audit:
		return a.auditCommand(body.Audit, res)
	case *fsmpb.Command_SetClusterEpoch:
		return a.setClusterEpoch(body.SetClusterEpoch, res)
	case *fsmpb.Command_RecordFeatures:
		return a.recordFeatures(body.RecordFeatures, res)
	case *fsmpb.Command_FeatureProbe:
		return nil
	case *fsmpb.Command_CertRevoke:
		return a.certRevoke(body.CertRevoke, res)
	case *fsmpb.Command_TokenCreate:
		return a.tokenCreate(body.TokenCreate, res)
	case *fsmpb.Command_TokenRevoke:
		return a.tokenRevoke(body.TokenRevoke, res)
	case *fsmpb.Command_AlarmObserve:
		return a.alarmObserve(body.AlarmObserve, res)
	case *fsmpb.Command_AlarmAck:
		return a.alarmAck(body.AlarmAck, res)
	case *fsmpb.Command_AlarmShelve:
		return a.alarmShelve(body.AlarmShelve, res)
	case *fsmpb.Command_AlarmComment:
		return a.alarmComment(body.AlarmComment, res)
	case *fsmpb.Command_AlarmHistoryMark:
		return a.alarmHistoryMark(body.AlarmHistoryMark, res)
	case *fsmpb.Command_Checkpoint:
		return a.checkpoint(body.Checkpoint, res)
	case *fsmpb.Command_CheckpointReport:
		return a.checkpointReport(body.CheckpointReport, res)
	case *fsmpb.Command_OpcuaTrustAdd:
		return a.opcuaTrustAdd(body.OpcuaTrustAdd, res)
	case *fsmpb.Command_OpcuaTrustRemove:
		return a.opcuaTrustRemove(body.OpcuaTrustRemove, res)
	case *fsmpb.Command_OpcuaTrustReject:
		return a.opcuaTrustReject(body.OpcuaTrustReject, res)
	case *fsmpb.Command_OpcuaUserSet:
		return a.opcuaUserSet(body.OpcuaUserSet, res)
	case *fsmpb.Command_OpcuaUserRemove:
		return a.opcuaUserRemove(body.OpcuaUserRemove, res)
	default:
		// Decode already refuses a nil body; a body type added to the
		// proto but not handled here must still be a clean refusal.
		res.Err = cmdErr(CodeDecode, "command body %T is not applied by this node", body)
		return nil
	}
}

func validateEnvelope(cmd *fsmpb.Command) *CommandError {
	if cmd.StampUnixNano < 0 {
		return cmdErr(CodeInvalid, "negative stamp %d", cmd.StampUnixNano)
	}
	return checkText("actor", cmd.Actor, MaxIDBytes)
}

// writeAudit appends an audit entry for the entry being applied.
func (a *applier) writeAudit(kind, detail string) (uint64, error) {
	a.auditSeq++
	rec := &fsmpb.AuditRecord{
		Seq:           a.auditSeq,
		StampUnixNano: a.cmd.StampUnixNano,
		Actor:         a.cmd.Actor,
		Kind:          kind,
		Detail:        detail,
		LogIndex:      a.index,
	}
	if err := a.putRecord(a.audit, u64(a.auditSeq), rec); err != nil {
		return 0, fmt.Errorf("append audit %d: %w", a.auditSeq, err)
	}
	return a.auditSeq, nil
}

// putRecord stores m under key, encoded deterministically. Stored records
// are generated types with no maps, so encoding cannot fail in practice; an
// error is a storage-class failure.
func (a *applier) putRecord(b *bolt.Bucket, key []byte, m proto.Message) error {
	opts := proto.MarshalOptions{Deterministic: true, UseCachedSize: true}
	n := opts.Size(m)
	v, err := opts.MarshalAppend(a.take(n), m)
	if err != nil {
		return err
	}
	return b.Put(key, v)
}

// The blocks records are marshalled into start small, for a batch of
// one command, and double up to the largest.
const (
	firstArenaChunk = 4 << 10
	maxArenaChunk   = 64 << 10
)

// take returns an empty slice with room for n bytes, carved from the
// batch's arena: bbolt keeps each key and value it is given until the
// transaction commits, so records are never written over, and one
// allocation serves many of them.
func (a *applier) take(n int) []byte {
	if n > maxArenaChunk/4 {
		return make([]byte, 0, n)
	}
	if cap(a.arena)-len(a.arena) < n {
		size := min(max(2*cap(a.arena), firstArenaChunk), maxArenaChunk)
		a.arena = make([]byte, 0, max(size, n))
	}
	start := len(a.arena)
	a.arena = a.arena[:start+n]
	return a.arena[start : start : start+n]
}

// getRecord decodes a stored record; ok is false when the key is absent.
func getRecord(b *bolt.Bucket, key []byte, m proto.Message) (ok bool, err error) {
	v := b.Get(key)
	if v == nil {
		return false, nil
	}
	if err := proto.Unmarshal(v, m); err != nil {
		return false, fmt.Errorf("decode stored %T at %q: %w", m, key, err)
	}
	return true, nil
}

func (a *applier) auditCommand(c *fsmpb.Audit, res *Result) error {
	if e := firstErr(checkID("audit kind", c.Kind), checkText("audit detail", c.Detail, MaxTextBytes)); e != nil {
		res.Err = e
		return nil
	}
	seq, err := a.writeAudit(c.Kind, c.Detail)
	if err != nil {
		return err
	}
	res.Audit = &AuditOutcome{Seq: seq}
	return nil
}

func (a *applier) setClusterEpoch(c *fsmpb.SetClusterEpoch, res *Result) error {
	if e := firstErr(checkID("node id", c.NodeId), checkText("reason", c.Reason, MaxTextBytes)); e != nil {
		res.Err = e
		return nil
	}
	prev := a.meta.ClusterEpoch
	if c.Epoch <= prev {
		res.Err = cmdErr(CodeEpochNotIncreasing, "cluster epoch %d is not above the current %d", c.Epoch, prev)
		return nil
	}
	a.meta.ClusterEpoch = c.Epoch
	if _, err := a.writeAudit("override", fmt.Sprintf("cluster epoch %d -> %d by node %s: %s", prev, c.Epoch, c.NodeId, c.Reason)); err != nil {
		return err
	}
	res.Epoch = &EpochOutcome{Previous: prev, Epoch: c.Epoch}
	return nil
}

func firstErr(errs ...*CommandError) *CommandError {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// checkID validates a non-empty identifier used as a bbolt key.
func checkID(what, s string) *CommandError {
	if s == "" {
		return cmdErr(CodeInvalid, "%s is empty", what)
	}
	if len(s) > MaxIDBytes {
		return cmdErr(CodeInvalid, "%s is %d bytes, limit %d", what, len(s), MaxIDBytes)
	}
	return nil
}

func checkText(what, s string, limit int) *CommandError {
	if len(s) > limit {
		return cmdErr(CodeInvalid, "%s is %d bytes, limit %d", what, len(s), limit)
	}
	return nil
}

func checkSHA(s string) *CommandError {
	if len(s) != 64 {
		return cmdErr(CodeInvalid, "sha256 must be 64 lower-case hex digits, got %d characters", len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return cmdErr(CodeInvalid, "sha256 must be 64 lower-case hex digits")
		}
	}
	return nil
}
