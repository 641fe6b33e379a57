package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/scadad/scadad/fsm/fsmpb"
)

// Read-side errors about artifacts.
var (
	// ErrArtifactUnavailable: the artifact exists but is not committed.
	ErrArtifactUnavailable = errors.New("fsm: artifact not committed")
	// ErrArtifactCorrupt: the stored chunks no longer hash to the address.
	ErrArtifactCorrupt = errors.New("fsm: artifact corrupt")
)

// DefaultListLimit is used when a list call passes limit <= 0; MaxListLimit
// caps every list call.
const (
	DefaultListLimit = 1000
	MaxListLimit     = 100_000
)

func clampLimit(limit int) int {
	switch {
	case limit <= 0:
		return DefaultListLimit
	case limit > MaxListLimit:
		return MaxListLimit
	}
	return limit
}

// stampTime turns a leader stamp into a time; 0 stays the zero time.
func stampTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// Header is one message header.
type Header struct{ Key, Value string }

// Message is a pending or parked store-and-forward message.
type Message struct {
	ID     string
	Target string
	// Seq is the message's position in the list it was read from: its
	// pending sequence number (FIFO order) or its park sequence number.
	Seq          uint64
	Payload      []byte
	Headers      []Header
	EnqueuedAt   time.Time
	EnqueueActor string
	// Attempts counts failed deliveries and LastError/LastAttemptAt
	// describe the latest, as the Active node recorded them (SFAttempts,
	// in batches: a pending message's figures may trail by a moment).
	Attempts      uint32
	LastError     string
	LastAttemptAt time.Time
	// ParkReason and ParkedAt are set on parked messages.
	ParkReason string
	ParkedAt   time.Time
}

func messageFrom(seq uint64, m *fsmpb.StoredMessage) Message {
	out := Message{
		ID:            m.Id,
		Target:        m.Target,
		Seq:           seq,
		Payload:       m.Payload,
		EnqueuedAt:    stampTime(m.EnqueueStampUnixNano),
		EnqueueActor:  m.EnqueueActor,
		Attempts:      m.Attempts,
		LastError:     m.LastError,
		LastAttemptAt: stampTime(m.LastAttemptStampUnixNano),
		ParkReason:    m.ParkReason,
		ParkedAt:      stampTime(m.ParkStampUnixNano),
	}
	for _, h := range m.Headers {
		out.Headers = append(out.Headers, Header{Key: h.Key, Value: h.Value})
	}
	return out
}

// TargetStats summarises one store-and-forward target.
type TargetStats struct {
	Pending   uint64
	Parked    uint64
	Delivered uint64
	Discarded uint64
	// OldestEnqueue is the enqueue stamp of the head of the pending queue;
	// zero when nothing is pending.
	OldestEnqueue time.Time
}

// DeployRecord is one revision of a target.
type DeployRecord struct {
	Revision   uint64
	SHA256     string
	Actor      string
	At         time.Time
	Message    string
	RollbackOf uint64
	LogIndex   uint64
}

// DeployAck is a node's latest ack for a target.
type DeployAck struct {
	NodeID   string
	Revision uint64
	OK       bool
	Reason   string
	At       time.Time
}

// Deployment is a target's pointer, history (oldest first) and acks (by node
// id).
type Deployment struct {
	Target   string
	Revision uint64
	SHA256   string
	History  []DeployRecord
	Acks     []DeployAck
}

// AuditEntry is one audit record.
type AuditEntry struct {
	Seq      uint64
	At       time.Time
	Actor    string
	Kind     string
	Detail   string
	LogIndex uint64
}

// ArtifactInfo describes a stored artifact.
type ArtifactInfo struct {
	SHA256       string
	TotalChunks  uint32
	StoredChunks int
	Committed    bool
	Size         uint64
	CommittedAt  time.Time
	CommittedBy  string
}

// MessageState is where a message id stands.
type MessageState int

const (
	// StateUnknown: never seen, or its tombstone was forgotten.
	StateUnknown MessageState = iota
	StatePending
	StateParked
	// StateFinished: delivered or discarded (remembered in the tombstones).
	StateFinished
)

func (s MessageState) String() string {
	switch s {
	case StatePending:
		return "pending"
	case StateParked:
		return "parked"
	case StateFinished:
		return "finished"
	default:
		return "unknown"
	}
}

// Artifact returns a committed artifact's bytes, re-verified against its
// address. It never returns partial or unverified bytes: an artifact a node
// cannot read is no answer, never an empty configuration.
func (f *FSM) Artifact(sha string) ([]byte, error) {
	var out []byte
	err := f.view(func(tx *bolt.Tx) error {
		ab := tx.Bucket(bucketArtifacts).Bucket([]byte(sha))
		if ab == nil {
			return fmt.Errorf("artifact %s: %w", sha, ErrNotFound)
		}
		var info fsmpb.ArtifactState
		if _, err := getRecord(ab, artifactInfo, &info); err != nil {
			return err
		}
		if !info.Committed {
			return fmt.Errorf("artifact %s: %w", sha, ErrArtifactUnavailable)
		}
		buf := bytes.NewBuffer(make([]byte, 0, info.Size))
		for i := uint32(0); i < info.TotalChunks; i++ {
			data := ab.Get(chunkKey(i))
			if data == nil {
				return fmt.Errorf("artifact %s: chunk %d missing: %w", sha, i, ErrArtifactCorrupt)
			}
			buf.Write(data)
		}
		sum := sha256.Sum256(buf.Bytes())
		if hex.EncodeToString(sum[:]) != sha || uint64(buf.Len()) != info.Size {
			return fmt.Errorf("artifact %s: stored bytes do not match: %w", sha, ErrArtifactCorrupt)
		}
		out = buf.Bytes()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read artifact: %w", err)
	}
	return out, nil
}

// ArtifactInfo describes one stored artifact (committed or not).
func (f *FSM) ArtifactInfo(sha string) (ArtifactInfo, error) {
	var out ArtifactInfo
	err := f.view(func(tx *bolt.Tx) error {
		ab := tx.Bucket(bucketArtifacts).Bucket([]byte(sha))
		if ab == nil {
			return fmt.Errorf("artifact %s: %w", sha, ErrNotFound)
		}
		var err error
		out, err = artifactInfoOf(sha, ab)
		return err
	})
	return out, err
}

func artifactInfoOf(sha string, ab *bolt.Bucket) (ArtifactInfo, error) {
	var info fsmpb.ArtifactState
	if _, err := getRecord(ab, artifactInfo, &info); err != nil {
		return ArtifactInfo{}, err
	}
	// every key but "info" is a chunk
	stored := ab.Stats().KeyN - 1
	return ArtifactInfo{
		SHA256:       sha,
		TotalChunks:  info.TotalChunks,
		StoredChunks: stored,
		Committed:    info.Committed,
		Size:         info.Size,
		CommittedAt:  stampTime(info.CommitStampUnixNano),
		CommittedBy:  info.CommittedBy,
	}, nil
}

// DeployTargets lists the targets that have been deployed, sorted.
func (f *FSM) DeployTargets() ([]string, error) {
	var out []string
	err := f.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketDeploy).ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}

// Deployment returns a target's current revision, history and acks, or
// ErrNotFound when the target was never deployed.
func (f *FSM) Deployment(target string) (Deployment, error) {
	out := Deployment{Target: target}
	err := f.view(func(tx *bolt.Tx) error {
		tb := tx.Bucket(bucketDeploy).Bucket([]byte(target))
		if tb == nil {
			return fmt.Errorf("deployment %q: %w", target, ErrNotFound)
		}
		var ptr fsmpb.DeployPointer
		if _, err := getRecord(tb, deployPtr, &ptr); err != nil {
			return err
		}
		out.Revision, out.SHA256 = ptr.Revision, ptr.Sha256
		err := tb.Bucket(deployHistory).ForEach(func(_, v []byte) error {
			var r fsmpb.DeployRecord
			if err := unmarshalStored(v, &r); err != nil {
				return err
			}
			out.History = append(out.History, DeployRecord{
				Revision: r.Revision, SHA256: r.Sha256, Actor: r.Actor, At: stampTime(r.StampUnixNano),
				Message: r.Message, RollbackOf: r.RollbackOf, LogIndex: r.LogIndex,
			})
			return nil
		})
		if err != nil {
			return err
		}
		return tb.Bucket(deployAcks).ForEach(func(_, v []byte) error {
			var r fsmpb.DeployAckRecord
			if err := unmarshalStored(v, &r); err != nil {
				return err
			}
			out.Acks = append(out.Acks, DeployAck{NodeID: r.NodeId, Revision: r.Revision, OK: r.Ok, Reason: r.Reason, At: stampTime(r.StampUnixNano)})
			return nil
		})
	})
	if err != nil {
		return Deployment{}, fmt.Errorf("read deployment: %w", err)
	}
	return out, nil
}

// SFPending returns up to limit pending messages of target with sequence
// numbers above afterSeq, in FIFO order. An unknown target has none.
func (f *FSM) SFPending(target string, afterSeq uint64, limit int) ([]Message, error) {
	return f.listQueue(sfPending, target, afterSeq, limit)
}

// SFParked returns up to limit parked messages of target, oldest parked
// first.
func (f *FSM) SFParked(target string, limit int) ([]Message, error) {
	return f.listQueue(sfParked, target, 0, limit)
}

func (f *FSM) listQueue(which []byte, target string, afterSeq uint64, limit int) ([]Message, error) {
	limit = clampLimit(limit)
	if afterSeq == math.MaxUint64 {
		return nil, nil
	}
	var out []Message
	err := f.view(func(tx *bolt.Tx) error {
		q := tx.Bucket(bucketSF).Bucket(which).Bucket([]byte(target))
		if q == nil {
			return nil
		}
		cur := q.Cursor()
		for k, v := cur.Seek(u64(afterSeq + 1)); k != nil && len(out) < limit; k, v = cur.Next() {
			var m fsmpb.StoredMessage
			if err := unmarshalStored(v, &m); err != nil {
				return err
			}
			// proto.Unmarshal copies bytes fields, so Payload outlives tx.
			out = append(out, messageFrom(getU64(k), &m))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s messages of %q: %w", which, target, err)
	}
	return out, nil
}

// SFTargets lists every target that ever had a message, sorted.
func (f *FSM) SFTargets() ([]string, error) {
	var out []string
	err := f.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSF).Bucket(sfTargets).ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}

// SFStats returns per-target counts and the age of each pending head.
func (f *FSM) SFStats() (map[string]TargetStats, error) {
	out := make(map[string]TargetStats)
	err := f.view(func(tx *bolt.Tx) error {
		sf := tx.Bucket(bucketSF)
		pending := sf.Bucket(sfPending)
		return sf.Bucket(sfTargets).ForEach(func(k, v []byte) error {
			var c fsmpb.TargetCounters
			if err := unmarshalStored(v, &c); err != nil {
				return err
			}
			st := TargetStats{Pending: c.Pending, Parked: c.Parked, Delivered: c.Delivered, Discarded: c.Discarded}
			if q := pending.Bucket(k); q != nil {
				if _, head := q.Cursor().First(); head != nil {
					var m fsmpb.StoredMessage
					if err := unmarshalStored(head, &m); err != nil {
						return err
					}
					st.OldestEnqueue = stampTime(m.EnqueueStampUnixNano)
				}
			}
			out[string(k)] = st
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read s&f stats: %w", err)
	}
	return out, nil
}

// SFLookup says where a message id stands.
func (f *FSM) SFLookup(id string) (MessageState, error) {
	state := StateUnknown
	err := f.view(func(tx *bolt.Tx) error {
		sf := tx.Bucket(bucketSF)
		var loc fsmpb.MessageLocation
		ok, err := getRecord(sf.Bucket(sfIDs), []byte(id), &loc)
		switch {
		case err != nil:
			return err
		case ok && loc.State == fsmpb.MessageState_MESSAGE_STATE_PARKED:
			state = StateParked
		case ok:
			state = StatePending
		case sf.Bucket(sfDelivered).Get([]byte(id)) != nil:
			state = StateFinished
		}
		return nil
	})
	return state, err
}

// SFHas reports whether enqueueing id now would be a duplicate: it is
// pending, parked, or remembered as delivered or discarded.
func (f *FSM) SFHas(id string) (bool, error) {
	s, err := f.SFLookup(id)
	return s != StateUnknown, err
}

// Audit returns up to limit audit entries with sequence numbers above
// afterSeq, oldest first.
func (f *FSM) Audit(afterSeq uint64, limit int) ([]AuditEntry, error) {
	limit = clampLimit(limit)
	if afterSeq == math.MaxUint64 {
		return nil, nil
	}
	var out []AuditEntry
	err := f.view(func(tx *bolt.Tx) error {
		cur := tx.Bucket(bucketAudit).Cursor()
		for k, v := cur.Seek(u64(afterSeq + 1)); k != nil && len(out) < limit; k, v = cur.Next() {
			var r fsmpb.AuditRecord
			if err := unmarshalStored(v, &r); err != nil {
				return err
			}
			out = append(out, AuditEntry{Seq: r.Seq, At: stampTime(r.StampUnixNano), Actor: r.Actor, Kind: r.Kind, Detail: r.Detail, LogIndex: r.LogIndex})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read audit: %w", err)
	}
	return out, nil
}

// sortedKeys is a helper for deterministic iteration of small maps.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
