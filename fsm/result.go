package fsm

// Result is what Apply returns for every entry (as interface{} for raft).
// Err is nil on success, a *CommandError for a deterministic refusal, or a
// *StorageError when the node's disk failed. At most one outcome field is
// set, matching the command's body.
type Result struct {
	// Index is the log index of the entry.
	Index uint64
	Err   error
	// Skipped is true when the entry was at or below the stored applied
	// index (a replay after restart) and was not applied again.
	Skipped bool

	Artifact  *ArtifactOutcome
	Deploy    *DeployOutcome
	Ack       *AckOutcome
	Enqueue   *EnqueueOutcome
	Delivered *DeliveredOutcome
	Park      *ParkOutcome
	Attempts  *AttemptsOutcome
	Birth     *BirthOutcome
	Retry     *MoveOutcome
	Discard   *MoveOutcome
	Audit     *AuditOutcome
	Epoch     *EpochOutcome
	Alarm     *AlarmOutcome
	// Checkpoint answers Checkpoint and CheckpointReport.
	Checkpoint *CheckpointOutcome
}

// ArtifactOutcome answers PutArtifactChunk and CommitArtifact.
type ArtifactOutcome struct {
	SHA256      string
	TotalChunks uint32
	// Committed is true once the artifact is complete and verified.
	Committed bool
	// AlreadyCommitted is true when the command found the artifact
	// committed before it and changed nothing.
	AlreadyCommitted bool
}

// DeployOutcome answers Deploy.
type DeployOutcome struct {
	Target   string
	Revision uint64 // the current revision after the command
	SHA256   string
	// NoChange is true when the artifact was already current: no new
	// revision was made (an idempotent retry of a deploy lands here).
	NoChange bool
}

// AckOutcome answers DeployAck.
type AckOutcome struct {
	// Stale is true when the node had already acked a newer revision; the
	// ack was not recorded.
	Stale bool
}

// EnqueueItem is the verdict for one message of an SFEnqueue.
type EnqueueItem struct {
	ID string
	// Duplicate is true when the id was already pending, parked or
	// recently delivered; the message was not stored again.
	Duplicate bool
	// Seq is the message's pending sequence number when it was stored now.
	Seq uint64
}

// EnqueueOutcome answers SFEnqueue, in the command's message order.
type EnqueueOutcome struct {
	Items      []EnqueueItem
	Added      int
	Duplicates int
}

// DeliveredOutcome answers SFDelivered.
type DeliveredOutcome struct {
	Removed          int // were pending or parked, now gone
	AlreadyDelivered int // were in the delivered tombstones
	Unknown          int // never seen (or forgotten)
}

// ParkOutcome answers SFPark.
type ParkOutcome struct {
	Target  string
	ParkSeq uint64
}

// AttemptsOutcome answers SFAttempts.
type AttemptsOutcome struct {
	Recorded int
	// NotPending counts ids that were delivered, parked or never seen by
	// the time the command applied; nothing was recorded for them.
	NotPending int
}

// BirthOutcome answers SFBirth.
type BirthOutcome struct {
	// Births counts the target's births, this one included (1 for the
	// first); the session's bdSeq is (Births-1) modulo 256.
	Births uint64
}

// MoveOutcome answers SFRetry and SFDiscard.
type MoveOutcome struct {
	Moved int
	// NotParked lists requested ids that were not parked (nothing done).
	NotParked []string
	// Remaining is how many messages the target still has parked after an
	// all_of_target command; issue the command again while it is non-zero.
	Remaining uint64
}

// AuditOutcome answers Audit.
type AuditOutcome struct{ Seq uint64 }

// EpochOutcome answers SetClusterEpoch.
type EpochOutcome struct{ Previous, Epoch uint64 }
