package fsm

import (
	"errors"
	"fmt"

	"github.com/scadad/scadad/internal/boltsafe"
)

// Code classifies a deterministic command failure.
type Code string

// Codes of CommandError. They are part of the replicated outcome: every node
// reports the same code and message for the same entry.
const (
	CodeDecode               Code = "decode"
	CodeUnsupportedVersion   Code = "unsupported_version"
	CodeInvalid              Code = "invalid"
	CodeRevisionMismatch     Code = "revision_mismatch"
	CodeArtifactNotCommitted Code = "artifact_not_committed"
	CodeArtifactIncomplete   Code = "artifact_incomplete"
	CodeArtifactChecksum     Code = "artifact_checksum"
	CodeArtifactCommitted    Code = "artifact_committed"
	CodeUnknown              Code = "unknown"
	CodeNotPending           Code = "not_pending"
	CodeEpochNotIncreasing   Code = "epoch_not_increasing"
	// CodeFeatureLevel is the leader's refusal of a command the cluster's
	// feature level does not reach yet (featuregate). It is answered
	// before raft, so it is no replicated outcome.
	CodeFeatureLevel Code = "feature_level"
)

// CommandError is the deterministic error a command yields when it cannot be
// decoded, validated or applied against the current state. The entry still
// advances the applied index; nothing else changes.
type CommandError struct {
	Code    Code
	Message string
}

func (e *CommandError) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Is matches CommandErrors by code, so errors.Is(res.Err, ErrRevisionMismatch)
// works whatever the message.
func (e *CommandError) Is(target error) bool {
	var t *CommandError
	if !errors.As(target, &t) {
		return false
	}
	return t.Code == e.Code
}

// Sentinels for errors.Is against Result.Err.
var (
	ErrDecode               = &CommandError{Code: CodeDecode}
	ErrUnsupportedVersion   = &CommandError{Code: CodeUnsupportedVersion}
	ErrInvalid              = &CommandError{Code: CodeInvalid}
	ErrRevisionMismatch     = &CommandError{Code: CodeRevisionMismatch}
	ErrArtifactNotCommitted = &CommandError{Code: CodeArtifactNotCommitted}
	ErrArtifactIncomplete   = &CommandError{Code: CodeArtifactIncomplete}
	ErrArtifactChecksum     = &CommandError{Code: CodeArtifactChecksum}
	// ErrArtifactCommitted is not returned by this version: a chunk or
	// commit for an already committed artifact succeeds with
	// ArtifactOutcome.AlreadyCommitted. Kept so callers may check for it.
	ErrArtifactCommitted  = &CommandError{Code: CodeArtifactCommitted}
	ErrNotPending         = &CommandError{Code: CodeNotPending}
	ErrUnknown            = &CommandError{Code: CodeUnknown}
	ErrEpochNotIncreasing = &CommandError{Code: CodeEpochNotIncreasing}
	ErrFeatureLevel       = &CommandError{Code: CodeFeatureLevel}
)

// Read-side and lifecycle errors (not replicated outcomes).
var (
	// ErrNotFound is returned by readers when the thing asked for does not
	// exist; callers must treat it as "no answer", never as empty state.
	ErrNotFound = errors.New("fsm: not found")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("fsm: closed")
	// ErrSnapshotCorrupt is wrapped by every refusal of a snapshot stream.
	ErrSnapshotCorrupt = errors.New("fsm: snapshot corrupt")
	// ErrSnapshotNewer is wrapped by the refusal of a snapshot a newer
	// release wrote (a newer stream format or state schema). Like every
	// refusal of a stream it also matches ErrSnapshotCorrupt.
	ErrSnapshotNewer error = snapshotNewer{}
)

type snapshotNewer struct{}

func (snapshotNewer) Error() string   { return "fsm: snapshot from a newer release" }
func (snapshotNewer) Is(t error) bool { return t == ErrSnapshotCorrupt }

func cmdErr(code Code, format string, args ...any) *CommandError {
	return &CommandError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// StorageError wraps a failure of the bbolt file itself. It is not
// deterministic: once one occurs the FSM refuses every later entry (see
// FSM.Err) so that the node stops instead of diverging; on restart the
// entries above the stored applied index are replayed.
type StorageError struct{ Err error }

func (e *StorageError) Error() string { return "fsm storage: " + e.Err.Error() }
func (e *StorageError) Unwrap() error { return e.Err }

// ErrDamagedState is returned by Open for a state file that cannot be
// read whole: truncated, failing bbolt's consistency check, or one bbolt
// panicked or faulted on. The file is derived state: discarding it lets
// raft rebuild it from the snapshots and the log.
var ErrDamagedState = errors.New("fsm: state file is damaged")

// damaged marks err as ErrDamagedState when it is a damaged file.
func damaged(path string, err error) error {
	if errors.Is(err, boltsafe.ErrDamaged) {
		return fmt.Errorf("%w: %w", ErrDamagedState, err)
	}
	return fmt.Errorf("open fsm state %s: %w", path, err)
}

// damagedOr marks err as ErrDamagedState when bbolt panicked or faulted on
// the file, and returns it unchanged otherwise.
func damagedOr(path string, err error) error {
	if errors.Is(err, boltsafe.ErrDamaged) {
		return fmt.Errorf("%w: %w", ErrDamagedState, err)
	}
	return err
}
