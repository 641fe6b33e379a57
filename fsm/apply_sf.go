package fsm

import (
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/scadad/scadad/fsm/fsmpb"
)

// maxHeaders bounds the headers of one message.
const maxHeaders = 64

// auditSampleIDs is how many ids a retry/discard audit entry names.
const auditSampleIDs = 20

func (a *applier) targetCounters(target string) (*fsmpb.TargetCounters, error) {
	if c, ok := a.counters[target]; ok {
		return c, nil
	}
	c := &fsmpb.TargetCounters{}
	ok, err := getRecord(a.targetsBucket, []byte(target), c)
	if err != nil {
		return nil, err
	}
	if !ok {
		c.NextSeq, c.NextParkSeq = 1, 1
	}
	a.counters[target] = c
	return c, nil
}

// queue returns the target's bucket inside parent (pending or parked),
// creating it when asked.
func queue(parent *bolt.Bucket, target string, create bool) (*bolt.Bucket, error) {
	b := parent.Bucket([]byte(target))
	if b == nil && create {
		var err error
		if b, err = parent.CreateBucket([]byte(target)); err != nil {
			return nil, fmt.Errorf("create queue %q: %w", target, err)
		}
	}
	if b != nil {
		// Appended at the tail, removed at the head: full pages are right.
		b.FillPercent = 0.95
	}
	return b, nil
}

func validateMessage(m *fsmpb.Message) *CommandError {
	if e := firstErr(checkID("message id", m.Id), checkID("target", m.Target)); e != nil {
		return e
	}
	if len(m.Payload) > MaxPayloadBytes {
		return cmdErr(CodeInvalid, "message %q: payload %d bytes, limit %d", m.Id, len(m.Payload), MaxPayloadBytes)
	}
	if len(m.Headers) > maxHeaders {
		return cmdErr(CodeInvalid, "message %q: %d headers, limit %d", m.Id, len(m.Headers), maxHeaders)
	}
	for _, h := range m.Headers {
		if e := firstErr(checkID("header name", h.Key), checkText("header value", h.Value, MaxTextBytes)); e != nil {
			return cmdErr(CodeInvalid, "message %q: %s", m.Id, e.Message)
		}
	}
	return nil
}

func (a *applier) sfEnqueue(c *fsmpb.SFEnqueue, res *Result) error {
	if n := len(c.Messages); n == 0 || n > MaxEnqueueBatch {
		res.Err = cmdErr(CodeInvalid, "enqueue of %d messages, want 1..%d", n, MaxEnqueueBatch)
		return nil
	}
	for _, m := range c.Messages {
		if e := validateMessage(m); e != nil {
			res.Err = e
			return nil
		}
	}
	out := &EnqueueOutcome{Items: make([]EnqueueItem, len(c.Messages))}
	for i, m := range c.Messages {
		id := append(a.take(len(m.Id)), m.Id...)
		out.Items[i].ID = m.Id
		if a.seen(id) {
			out.Items[i].Duplicate = true
			out.Duplicates++
			continue
		}
		counters, err := a.targetCounters(m.Target)
		if err != nil {
			return err
		}
		q, err := queue(a.pending, m.Target, true)
		if err != nil {
			return err
		}
		seq := counters.NextSeq
		stored := &fsmpb.StoredMessage{
			Id:                   m.Id,
			Target:               m.Target,
			Payload:              m.Payload,
			Headers:              m.Headers,
			EnqueueStampUnixNano: a.cmd.StampUnixNano,
			EnqueueActor:         a.cmd.Actor,
		}
		if err := a.putRecord(q, appendU64(a.take(8), seq), stored); err != nil {
			return fmt.Errorf("store message %q: %w", m.Id, err)
		}
		loc := &fsmpb.MessageLocation{State: fsmpb.MessageState_MESSAGE_STATE_PENDING, Target: m.Target, Seq: seq}
		if err := a.putRecord(a.ids, id, loc); err != nil {
			return fmt.Errorf("index message %q: %w", m.Id, err)
		}
		counters.NextSeq++
		counters.Pending++
		out.Items[i].Seq = seq
		out.Added++
	}
	res.Enqueue = out
	return nil
}

// locate returns where a live (pending or parked) message sits.
func (a *applier) locate(id string) (*fsmpb.MessageLocation, error) {
	loc := &fsmpb.MessageLocation{}
	ok, err := getRecord(a.ids, []byte(id), loc)
	if err != nil || !ok {
		return nil, err
	}
	return loc, nil
}

// remove deletes a live message from its queue and the id index and returns
// it with its target's counters (not yet adjusted).
func (a *applier) remove(id string, loc *fsmpb.MessageLocation) (*fsmpb.StoredMessage, *fsmpb.TargetCounters, error) {
	parent := a.pending
	if loc.State == fsmpb.MessageState_MESSAGE_STATE_PARKED {
		parent = a.parked
	}
	q, err := queue(parent, loc.Target, false)
	if err != nil {
		return nil, nil, err
	}
	if q == nil {
		return nil, nil, fmt.Errorf("message %q indexed in missing queue %q", id, loc.Target)
	}
	msg := &fsmpb.StoredMessage{}
	ok, err := getRecord(q, u64(loc.Seq), msg)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, nil, fmt.Errorf("message %q indexed at %s/%d but absent", id, loc.Target, loc.Seq)
	}
	if err := q.Delete(u64(loc.Seq)); err != nil {
		return nil, nil, err
	}
	if err := a.ids.Delete([]byte(id)); err != nil {
		return nil, nil, err
	}
	counters, err := a.targetCounters(loc.Target)
	if err != nil {
		return nil, nil, err
	}
	if loc.State == fsmpb.MessageState_MESSAGE_STATE_PARKED {
		counters.Parked--
	} else {
		counters.Pending--
	}
	return msg, counters, nil
}

// tombstone remembers a finished id, forgetting the oldest beyond
// DeliveredTombstones. Tombstone sequence numbers are contiguous, so the one
// to forget is exactly DeliveredTombstones behind the new one.
func (a *applier) tombstone(id string) error {
	if a.delivered.Get([]byte(id)) != nil {
		return nil
	}
	a.deliveredSeq++
	seq := a.deliveredSeq
	if err := a.delivered.Put([]byte(id), u64(seq)); err != nil {
		return err
	}
	if err := a.deliveredOrder.Put(u64(seq), []byte(id)); err != nil {
		return err
	}
	if seq <= DeliveredTombstones {
		return nil
	}
	old := u64(seq - DeliveredTombstones)
	if oldID := a.deliveredOrder.Get(old); oldID != nil {
		if err := a.delivered.Delete(oldID); err != nil {
			return err
		}
		if err := a.deliveredOrder.Delete(old); err != nil {
			return err
		}
	}
	return nil
}

func checkIDs(ids []string) *CommandError {
	if n := len(ids); n > MaxBulk {
		return cmdErr(CodeInvalid, "%d ids, limit %d", n, MaxBulk)
	}
	for _, id := range ids {
		if e := checkID("message id", id); e != nil {
			return e
		}
	}
	return nil
}

func (a *applier) sfDelivered(c *fsmpb.SFDelivered, res *Result) error {
	if len(c.Ids) == 0 {
		res.Err = cmdErr(CodeInvalid, "no ids")
		return nil
	}
	if e := checkIDs(c.Ids); e != nil {
		res.Err = e
		return nil
	}
	out := &DeliveredOutcome{}
	for _, id := range c.Ids {
		loc, err := a.locate(id)
		if err != nil {
			return err
		}
		switch {
		case loc != nil:
			_, counters, err := a.remove(id, loc)
			if err != nil {
				return err
			}
			counters.Delivered++
			out.Removed++
		case a.delivered.Get([]byte(id)) != nil:
			out.AlreadyDelivered++
			continue
		default:
			// Delivered somewhere before this node saw the enqueue (a
			// healed split hands over ids in any order): remember it so
			// the enqueue, when it comes, is a duplicate.
			out.Unknown++
		}
		if err := a.tombstone(id); err != nil {
			return err
		}
	}
	res.Delivered = out
	return nil
}

func (a *applier) sfPark(c *fsmpb.SFPark, res *Result) error {
	if e := firstErr(checkID("message id", c.Id), checkText("reason", c.Reason, MaxTextBytes)); e != nil {
		res.Err = e
		return nil
	}
	loc, err := a.locate(c.Id)
	if err != nil {
		return err
	}
	if loc == nil || loc.State != fsmpb.MessageState_MESSAGE_STATE_PENDING {
		res.Err = cmdErr(CodeNotPending, "message %q is not pending", c.Id)
		return nil
	}
	msg, counters, err := a.remove(c.Id, loc)
	if err != nil {
		return err
	}
	msg.Attempts = c.Attempts
	msg.ParkReason = c.Reason
	msg.ParkStampUnixNano = a.cmd.StampUnixNano
	msg.LastError = c.Reason
	msg.LastAttemptStampUnixNano = a.cmd.StampUnixNano
	parkSeq, err := a.place(msg, counters, fsmpb.MessageState_MESSAGE_STATE_PARKED)
	if err != nil {
		return err
	}
	res.Park = &ParkOutcome{Target: msg.Target, ParkSeq: parkSeq}
	return nil
}

// sfAttempts records failed attempts of pending messages in place. The
// whole command is checked before anything changes.
func (a *applier) sfAttempts(c *fsmpb.SFAttempts, res *Result) error {
	if n := len(c.Attempts); n == 0 || n > MaxBulk {
		res.Err = cmdErr(CodeInvalid, "attempts of %d messages, want 1..%d", n, MaxBulk)
		return nil
	}
	for _, at := range c.Attempts {
		if e := firstErr(checkID("message id", at.Id), checkText("last error", at.LastError, MaxTextBytes)); e != nil {
			res.Err = e
			return nil
		}
	}
	out := &AttemptsOutcome{}
	for _, at := range c.Attempts {
		loc, err := a.locate(at.Id)
		if err != nil {
			return err
		}
		if loc == nil || loc.State != fsmpb.MessageState_MESSAGE_STATE_PENDING {
			out.NotPending++
			continue
		}
		q, err := queue(a.pending, loc.Target, false)
		if err != nil {
			return err
		}
		if q == nil {
			return fmt.Errorf("message %q indexed in missing queue %q", at.Id, loc.Target)
		}
		msg := &fsmpb.StoredMessage{}
		ok, err := getRecord(q, u64(loc.Seq), msg)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("message %q indexed at %s/%d but absent", at.Id, loc.Target, loc.Seq)
		}
		msg.Attempts = at.Attempts
		msg.LastError = at.LastError
		msg.LastAttemptStampUnixNano = a.cmd.StampUnixNano
		if err := a.putRecord(q, u64(loc.Seq), msg); err != nil {
			return fmt.Errorf("record attempts of %q: %w", at.Id, err)
		}
		out.Recorded++
	}
	res.Attempts = out
	return nil
}

// place appends msg to the tail of its target's pending or parked queue and
// indexes it.
func (a *applier) place(msg *fsmpb.StoredMessage, counters *fsmpb.TargetCounters, state fsmpb.MessageState) (uint64, error) {
	parent, seq := a.pending, counters.NextSeq
	if state == fsmpb.MessageState_MESSAGE_STATE_PARKED {
		parent, seq = a.parked, counters.NextParkSeq
	}
	q, err := queue(parent, msg.Target, true)
	if err != nil {
		return 0, err
	}
	if err := a.putRecord(q, u64(seq), msg); err != nil {
		return 0, fmt.Errorf("store message %q: %w", msg.Id, err)
	}
	loc := &fsmpb.MessageLocation{State: state, Target: msg.Target, Seq: seq}
	if err := a.putRecord(a.ids, []byte(msg.Id), loc); err != nil {
		return 0, fmt.Errorf("index message %q: %w", msg.Id, err)
	}
	if state == fsmpb.MessageState_MESSAGE_STATE_PARKED {
		counters.NextParkSeq++
		counters.Parked++
	} else {
		counters.NextSeq++
		counters.Pending++
	}
	return seq, nil
}

// selectParked resolves an ids-or-target selector into parked messages'
// ids (at most MaxBulk, oldest first for a target) and the ids not parked.
func (a *applier) selectParked(ids []string, target string) (parked, notParked []string, cerr *CommandError, err error) {
	switch {
	case len(ids) > 0 && target != "":
		return nil, nil, cmdErr(CodeInvalid, "give ids or all_of_target, not both"), nil
	case len(ids) == 0 && target == "":
		return nil, nil, cmdErr(CodeInvalid, "give ids or all_of_target"), nil
	case target != "":
		if e := checkID("target", target); e != nil {
			return nil, nil, e, nil
		}
		q, err := queue(a.parked, target, false)
		if err != nil || q == nil {
			return nil, nil, nil, err
		}
		cur := q.Cursor()
		for k, v := cur.First(); k != nil && len(parked) < MaxBulk; k, v = cur.Next() {
			var msg fsmpb.StoredMessage
			if err := unmarshalStored(v, &msg); err != nil {
				return nil, nil, nil, err
			}
			parked = append(parked, msg.Id)
		}
		return parked, nil, nil, nil
	}
	if e := checkIDs(ids); e != nil {
		return nil, nil, e, nil
	}
	for _, id := range ids {
		loc, err := a.locate(id)
		if err != nil {
			return nil, nil, nil, err
		}
		if loc == nil || loc.State != fsmpb.MessageState_MESSAGE_STATE_PARKED {
			notParked = append(notParked, id)
			continue
		}
		parked = append(parked, id)
	}
	return parked, notParked, nil, nil
}

// moveParked applies act to each selected parked message and audits it.
func (a *applier) moveParked(kind string, ids []string, target, reason string, res *Result,
	act func(msg *fsmpb.StoredMessage, counters *fsmpb.TargetCounters) error) (*MoveOutcome, error) {
	if e := checkText("reason", reason, MaxTextBytes); e != nil {
		res.Err = e
		return nil, nil
	}
	selected, notParked, cerr, err := a.selectParked(ids, target)
	if err != nil {
		return nil, err
	}
	if cerr != nil {
		res.Err = cerr
		return nil, nil
	}
	out := &MoveOutcome{NotParked: notParked}
	for _, id := range selected {
		loc, err := a.locate(id)
		if err != nil {
			return nil, err
		}
		if loc == nil || loc.State != fsmpb.MessageState_MESSAGE_STATE_PARKED {
			// The same id listed twice: the first occurrence moved it.
			out.NotParked = append(out.NotParked, id)
			continue
		}
		msg, counters, err := a.remove(id, loc)
		if err != nil {
			return nil, err
		}
		if err := act(msg, counters); err != nil {
			return nil, err
		}
		out.Moved++
	}
	if target != "" {
		counters, err := a.targetCounters(target)
		if err != nil {
			return nil, err
		}
		out.Remaining = counters.Parked
	}
	if out.Moved > 0 {
		if _, err := a.writeAudit(kind, moveDetail(out.Moved, selected, target, reason)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func moveDetail(moved int, ids []string, target, reason string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d message(s)", moved)
	if target != "" {
		fmt.Fprintf(&b, " of target %s", target)
	}
	sample := ids
	if len(sample) > auditSampleIDs {
		sample = sample[:auditSampleIDs]
	}
	fmt.Fprintf(&b, ": %s", strings.Join(sample, ", "))
	if len(ids) > len(sample) {
		fmt.Fprintf(&b, " and %d more", len(ids)-len(sample))
	}
	if reason != "" {
		fmt.Fprintf(&b, " (%s)", reason)
	}
	return b.String()
}

func (a *applier) sfRetry(c *fsmpb.SFRetry, res *Result) error {
	out, err := a.moveParked("sf.retry", c.Ids, c.AllOfTarget, "", res,
		func(msg *fsmpb.StoredMessage, counters *fsmpb.TargetCounters) error {
			msg.Attempts, msg.ParkReason, msg.ParkStampUnixNano = 0, "", 0
			msg.LastError, msg.LastAttemptStampUnixNano = "", 0
			_, err := a.place(msg, counters, fsmpb.MessageState_MESSAGE_STATE_PENDING)
			return err
		})
	res.Retry = out
	return err
}

func (a *applier) sfDiscard(c *fsmpb.SFDiscard, res *Result) error {
	out, err := a.moveParked("sf.discard", c.Ids, c.AllOfTarget, c.Reason, res,
		func(msg *fsmpb.StoredMessage, counters *fsmpb.TargetCounters) error {
			counters.Discarded++
			// A discarded id stays finished: a late re-send is a duplicate.
			return a.tombstone(msg.Id)
		})
	res.Discard = out
	return err
}

// sfBirth counts a new Sparkplug session of a target.
func (a *applier) sfBirth(c *fsmpb.SFBirth, res *Result) error {
	if e := checkID("target", c.Target); e != nil {
		res.Err = e
		return nil
	}
	counters, err := a.targetCounters(c.Target)
	if err != nil {
		return err
	}
	counters.Births++
	res.Birth = &BirthOutcome{Births: counters.Births}
	return nil
}
