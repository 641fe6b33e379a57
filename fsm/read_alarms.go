package fsm

import (
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/scadad/scadad/fsm/fsmpb"
)

// Alarms returns every alarm's replicated state, in alarm id order.
func (f *FSM) Alarms() ([]*fsmpb.AlarmRecord, error) {
	var out []*fsmpb.AlarmRecord
	err := f.view(func(tx *bolt.Tx) error {
		st := alarmBucket(tx, alarmsState)
		if st == nil {
			return nil
		}
		return st.ForEach(func(k, v []byte) error {
			rec := &fsmpb.AlarmRecord{}
			if err := unmarshalStored(v, rec); err != nil {
				return fmt.Errorf("alarm %q: %w", k, err)
			}
			out = append(out, rec)
			return nil
		})
	})
	return out, err
}

// Alarm returns one alarm's state; ok is false for an alarm not known.
func (f *FSM) Alarm(id string) (rec *fsmpb.AlarmRecord, ok bool, err error) {
	rec = &fsmpb.AlarmRecord{}
	err = f.view(func(tx *bolt.Tx) error {
		st := alarmBucket(tx, alarmsState)
		if st == nil {
			return nil
		}
		ok, err = getRecord(st, []byte(id), rec)
		return err
	})
	return rec, ok, err
}

// AlarmLogPosition returns the newest alarm log seq and the alarm-history
// mark (every transition up to it is enqueued).
func (f *FSM) AlarmLogPosition() (last, historyMark uint64, err error) {
	err = f.view(func(tx *bolt.Tx) error {
		if ab := tx.Bucket(bucketAlarms); ab != nil {
			last, historyMark = getU64(ab.Get(alarmsLogSeq)), getU64(ab.Get(alarmsHistoryMark))
		}
		return nil
	})
	return last, historyMark, err
}

// AlarmLogAfter returns up to limit alarm log entries after seq, oldest
// first. Entries older than the log keeps (MaxAlarmLog) are gone: the
// first returned may be later than seq+1.
func (f *FSM) AlarmLogAfter(seq uint64, limit int) ([]*fsmpb.AlarmTransition, error) {
	var out []*fsmpb.AlarmTransition
	err := f.view(func(tx *bolt.Tx) error {
		lg := alarmBucket(tx, alarmsLog)
		if lg == nil {
			return nil
		}
		c := lg.Cursor()
		for k, v := c.Seek(u64(seq + 1)); k != nil && len(out) < limit; k, v = c.Next() {
			t := &fsmpb.AlarmTransition{}
			if err := unmarshalStored(v, t); err != nil {
				return fmt.Errorf("alarm log %d: %w", getU64(k), err)
			}
			out = append(out, t)
		}
		return nil
	})
	return out, err
}

func alarmBucket(tx *bolt.Tx, name []byte) *bolt.Bucket {
	ab := tx.Bucket(bucketAlarms)
	if ab == nil {
		return nil
	}
	return ab.Bucket(name)
}
