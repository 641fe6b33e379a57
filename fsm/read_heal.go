package fsm

import (
	"fmt"
	"math"

	bolt "go.etcd.io/bbolt"

	"github.com/scadad/scadad/fsm/fsmpb"
)

// Read functions for the dual-active heal (package heal): the loser hands
// the winner everything it holds, page by page, from a state that no longer
// changes (its raft is stopped).

// FinishedID is one remembered delivered-or-discarded message id with its
// tombstone sequence number.
type FinishedID struct {
	Seq uint64
	ID  string
}

// SFFinishedAfter returns up to limit remembered delivered or discarded ids
// with tombstone sequence numbers above afterSeq, oldest first. Only the
// newest DeliveredTombstones are remembered.
func (f *FSM) SFFinishedAfter(afterSeq uint64, limit int) ([]FinishedID, error) {
	limit = clampLimit(limit)
	if afterSeq == math.MaxUint64 {
		return nil, nil
	}
	var out []FinishedID
	err := f.view(func(tx *bolt.Tx) error {
		cur := tx.Bucket(bucketSF).Bucket(sfDeliveredOrder).Cursor()
		for k, v := cur.Seek(u64(afterSeq + 1)); k != nil && len(out) < limit; k, v = cur.Next() {
			out = append(out, FinishedID{Seq: getU64(k), ID: string(v)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list finished message ids: %w", err)
	}
	return out, nil
}

// SFParkedAfter returns up to limit parked messages of target with park
// sequence numbers above afterSeq, oldest parked first (SFParked pages).
func (f *FSM) SFParkedAfter(target string, afterSeq uint64, limit int) ([]Message, error) {
	return f.listQueue(sfParked, target, afterSeq, limit)
}

// AuditNewestFirst calls fn with audit entries from the newest backwards
// until fn returns false or the trail ends.
func (f *FSM) AuditNewestFirst(fn func(AuditEntry) bool) error {
	err := f.viewCommitted(func(tx *bolt.Tx) error {
		cur := tx.Bucket(bucketAudit).Cursor()
		for k, v := cur.Last(); k != nil; k, v = cur.Prev() {
			var r fsmpb.AuditRecord
			if err := unmarshalStored(v, &r); err != nil {
				return err
			}
			if !fn(AuditEntry{Seq: r.Seq, At: stampTime(r.StampUnixNano), Actor: r.Actor, Kind: r.Kind, Detail: r.Detail, LogIndex: r.LogIndex}) {
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read audit backwards: %w", err)
	}
	return nil
}
