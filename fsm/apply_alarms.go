package fsm

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/scadad/scadad/fsm/fsmpb"
)

// The alarms bucket holds the site's alarm state (issue 30): one record
// per alarm, and the alarm log of transitions in apply order. It is made
// by the first alarm command, so a state that never saw an alarm is the
// same as before the bucket existed.
var (
	bucketAlarms      = []byte("alarms")
	alarmsState       = []byte("state") // alarm id → AlarmRecord
	alarmsLog         = []byte("log")   // log seq → AlarmTransition
	alarmsLogSeq      = []byte("log_seq")
	alarmsHistoryMark = []byte("history_mark")
)

// Alarm limits, part of the replicated semantics.
const (
	// MaxAlarms bounds the alarms the state keeps. Records are never
	// removed: an alarm's transition numbers must never start over, or
	// (alarm id, seq) would name two transitions.
	MaxAlarms = 100_000
	// MaxAlarmLog is how many transitions the alarm log keeps.
	MaxAlarmLog = 200_000
	// MaxAlarmConditions bounds the conditions of one AlarmObserve.
	MaxAlarmConditions = 10_000
)

// Alarm transition kinds.
const (
	AlarmRaised       = "raised"
	AlarmCleared      = "cleared"
	AlarmAcknowledged = "acknowledged"
	AlarmConfirmed    = "confirmed"
	AlarmShelved      = "shelved"
	AlarmUnshelved    = "unshelved"
	AlarmCommented    = "comment"
	AlarmChanged      = "changed"
)

// AlarmOutcome answers the alarm commands.
type AlarmOutcome struct {
	// Transitions are the alarm log entries the command made.
	Transitions []*fsmpb.AlarmTransition
	// Unchanged is true when the command changed nothing (an acknowledged
	// alarm acknowledged again, a refresh that matched the state).
	Unchanged bool
}

type alarmApplier struct {
	a              *applier
	state, log, ab *bolt.Bucket
	logSeq         uint64
	out            *AlarmOutcome
}

func (a *applier) alarmBuckets() (*alarmApplier, error) {
	ab, err := a.tx.CreateBucketIfNotExists(bucketAlarms)
	if err != nil {
		return nil, fmt.Errorf("create alarms bucket: %w", err)
	}
	st, err := ab.CreateBucketIfNotExists(alarmsState)
	if err != nil {
		return nil, fmt.Errorf("create alarms/state bucket: %w", err)
	}
	lg, err := ab.CreateBucketIfNotExists(alarmsLog)
	if err != nil {
		return nil, fmt.Errorf("create alarms/log bucket: %w", err)
	}
	lg.FillPercent = 0.95
	return &alarmApplier{a: a, state: st, log: lg, ab: ab, logSeq: getU64(ab.Get(alarmsLogSeq)), out: &AlarmOutcome{}}, nil
}

func (x *alarmApplier) load(id string) (*fsmpb.AlarmRecord, bool, error) {
	rec := &fsmpb.AlarmRecord{}
	ok, err := getRecord(x.state, []byte(id), rec)
	return rec, ok, err
}

// transition numbers a change of rec, appends it to the log (forgetting
// the oldest beyond MaxAlarmLog) and stores rec.
func (x *alarmApplier) transition(rec *fsmpb.AlarmRecord, kind string, stamp int64, operator, comment string) error {
	rec.Seq++
	x.logSeq++
	t := &fsmpb.AlarmTransition{LogSeq: x.logSeq, AlarmId: rec.AlarmId, Seq: rec.Seq, Kind: kind, StampUnixNano: stamp,
		Operator: operator, Comment: comment, State: proto.Clone(rec).(*fsmpb.AlarmRecord), LogIndex: x.a.index}
	if err := x.a.putRecord(x.log, u64(x.logSeq), t); err != nil {
		return fmt.Errorf("append alarm log %d: %w", x.logSeq, err)
	}
	if x.logSeq > MaxAlarmLog {
		if err := x.log.Delete(u64(x.logSeq - MaxAlarmLog)); err != nil {
			return err
		}
	}
	x.out.Transitions = append(x.out.Transitions, t)
	return x.store(rec)
}

func (x *alarmApplier) store(rec *fsmpb.AlarmRecord) error {
	if err := x.a.putRecord(x.state, []byte(rec.AlarmId), rec); err != nil {
		return fmt.Errorf("store alarm %q: %w", rec.AlarmId, err)
	}
	return nil
}

func (x *alarmApplier) finish(res *Result) error {
	if err := x.ab.Put(alarmsLogSeq, u64(x.logSeq)); err != nil {
		return err
	}
	x.out.Unchanged = len(x.out.Transitions) == 0
	res.Alarm = x.out
	return nil
}

func checkCondition(c *fsmpb.AlarmCondition) *CommandError {
	if e := firstErr(checkID("alarm id", c.AlarmId), checkID("alarm source", c.Source), checkText("condition name", c.ConditionName, MaxIDBytes),
		checkText("alarm message", c.Message, MaxTextBytes), checkText("condition state", c.ConditionState, MaxIDBytes),
		checkText("ack operator", c.AckOperator, MaxIDBytes), checkText("ack comment", c.AckComment, MaxTextBytes),
		checkText("alarm kind", c.Kind, MaxIDBytes), checkText("connection", c.Connection, MaxIDBytes)); e != nil {
		return cmdErr(CodeInvalid, "alarm %q: %s", c.AlarmId, e.Message)
	}
	if c.Severity < 1 || c.Severity > 1000 {
		return cmdErr(CodeInvalid, "alarm %q: severity %d outside 1..1000", c.AlarmId, c.Severity)
	}
	return nil
}

func (a *applier) alarmObserve(c *fsmpb.AlarmObserve, res *Result) error {
	if n := len(c.Conditions); n > MaxAlarmConditions || (n == 0 && c.RefreshSource == "") {
		res.Err = cmdErr(CodeInvalid, "alarm observe of %d conditions, want 1..%d (or a source refresh)", n, MaxAlarmConditions)
		return nil
	}
	seen := make(map[string]bool, len(c.Conditions))
	for _, cond := range c.Conditions {
		if e := checkCondition(cond); e != nil {
			res.Err = e
			return nil
		}
		if c.RefreshSource != "" && (cond.Source != c.RefreshSource || cond.Connection != c.RefreshConnection) {
			res.Err = cmdErr(CodeInvalid, "alarm %q of source %q in the refresh of source %q", cond.AlarmId, cond.Source, c.RefreshSource)
			return nil
		}
		if seen[cond.AlarmId] {
			res.Err = cmdErr(CodeInvalid, "alarm %q twice in one observe", cond.AlarmId)
			return nil
		}
		seen[cond.AlarmId] = true
	}
	if e := firstErr(checkText("refresh source", c.RefreshSource, MaxIDBytes), checkText("refresh connection", c.RefreshConnection, MaxIDBytes)); e != nil {
		res.Err = e
		return nil
	}
	x, err := a.alarmBuckets()
	if err != nil {
		return err
	}
	// Refused before anything is written: more alarms than the state keeps.
	fresh := 0
	for _, cond := range c.Conditions {
		if x.state.Get([]byte(cond.AlarmId)) == nil {
			fresh++
		}
	}
	if fresh > 0 && x.state.Stats().KeyN+fresh > MaxAlarms {
		res.Err = cmdErr(CodeInvalid, "alarm observe would keep more than %d alarms", MaxAlarms)
		return nil
	}
	for _, cond := range c.Conditions {
		if err := x.observe(cond); err != nil {
			return err
		}
	}
	if c.RefreshSource != "" {
		// Active alarms of the source the snapshot no longer has: the
		// gateway forgot them, so they cleared. Keys in order: deterministic.
		var gone []*fsmpb.AlarmRecord
		err := x.state.ForEach(func(k, v []byte) error {
			if seen[string(k)] {
				return nil
			}
			rec := &fsmpb.AlarmRecord{}
			if err := proto.Unmarshal(v, rec); err != nil {
				return fmt.Errorf("decode alarm %q: %w", k, err)
			}
			if rec.Active && rec.Source == c.RefreshSource && rec.Connection == c.RefreshConnection {
				gone = append(gone, rec)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, rec := range gone {
			rec.Active, rec.ConditionState, rec.TransitionUnixNano = false, "Normal", a.cmd.StampUnixNano
			if err := x.transition(rec, AlarmCleared, a.cmd.StampUnixNano, "", ""); err != nil {
				return err
			}
		}
	}
	return x.finish(res)
}

// observe turns one field condition into the transitions it implies.
func (x *alarmApplier) observe(c *fsmpb.AlarmCondition) error {
	rec, ok, err := x.load(c.AlarmId)
	if err != nil {
		return err
	}
	if ok && c.GatewaySeq != 0 && c.GatewaySeq <= rec.GatewaySeq && c.Connection == rec.Connection {
		return nil // a duplicate or an older report of the gateway's
	}
	stamp := c.TransitionUnixNano
	if stamp == 0 {
		stamp = x.a.cmd.StampUnixNano
	}
	if !ok {
		if !c.Active && c.Acked {
			return nil // returned to normal and acknowledged before we knew it
		}
		rec = &fsmpb.AlarmRecord{AlarmId: c.AlarmId}
	}
	rec.Source, rec.ConditionName, rec.Kind, rec.Connection = c.Source, c.ConditionName, c.Kind, c.Connection
	rec.GatewaySeq = max(rec.GatewaySeq, c.GatewaySeq)
	changed := rec.Severity != c.Severity || rec.Message != c.Message || rec.ConditionState != c.ConditionState
	rec.Severity, rec.Message, rec.ConditionState = c.Severity, c.Message, c.ConditionState
	raised := false
	switch {
	case c.Active && !rec.Active:
		rec.Active, rec.Acked, rec.Confirmed = true, false, false
		rec.AckOperator, rec.AckComment, rec.AckUnixNano = "", "", 0
		rec.ActiveSinceUnixNano, rec.TransitionUnixNano = stamp, stamp
		raised = true
		if err := x.transition(rec, AlarmRaised, stamp, "", ""); err != nil {
			return err
		}
	case !c.Active && rec.Active:
		rec.Active, rec.TransitionUnixNano = false, stamp
		if err := x.transition(rec, AlarmCleared, stamp, "", ""); err != nil {
			return err
		}
	case !ok:
		// First seen already inactive and unacknowledged: it needs its
		// acknowledgement, so it is recorded.
		rec.TransitionUnixNano = stamp
		if err := x.transition(rec, AlarmCleared, stamp, "", ""); err != nil {
			return err
		}
	case changed && rec.Active:
		rec.TransitionUnixNano = stamp
		if err := x.transition(rec, AlarmChanged, stamp, "", ""); err != nil {
			return err
		}
	}
	// An acknowledgement the field has and the state lacks (made at an
	// HMI, or by an Active that died before recording it) is recorded. The
	// reverse (the state acknowledged, the field not) keeps the state's:
	// the Active sends it to the gateway again.
	if c.Acked && !rec.Acked {
		rec.Acked, rec.AckOperator, rec.AckComment, rec.AckUnixNano = true, c.AckOperator, c.AckComment, stamp
		return x.transition(rec, AlarmAcknowledged, stamp, c.AckOperator, c.AckComment)
	}
	if !raised {
		return x.store(rec)
	}
	return nil
}

// knownAlarm opens the alarm buckets and loads alarm id, refusing (res.Err)
// one that is not known: rec is nil then.
func (a *applier) knownAlarm(id string, res *Result) (*alarmApplier, *fsmpb.AlarmRecord, error) {
	x, err := a.alarmBuckets()
	if err != nil {
		return nil, nil, err
	}
	rec, ok, err := x.load(id)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		res.Err = cmdErr(CodeUnknown, "alarm %q is not known", id)
		return x, nil, nil
	}
	return x, rec, nil
}

func (a *applier) alarmOperator(id, operator, comment string) *CommandError {
	return firstErr(checkID("alarm id", id), checkID("operator", operator), checkText("comment", comment, MaxTextBytes))
}

func (a *applier) alarmAck(c *fsmpb.AlarmAck, res *Result) error {
	if e := a.alarmOperator(c.AlarmId, c.Operator, c.Comment); e != nil {
		res.Err = e
		return nil
	}
	x, rec, err := a.knownAlarm(c.AlarmId, res)
	if err != nil || rec == nil {
		return err
	}
	stamp := a.cmd.StampUnixNano
	switch {
	case c.Confirm && !rec.Acked:
		res.Err = cmdErr(CodeInvalid, "alarm %q: confirm before it is acknowledged", c.AlarmId)
		return nil
	case c.Confirm && rec.Confirmed, !c.Confirm && rec.Acked:
		// Already done: the first acknowledgement stands.
	case c.Confirm:
		rec.Confirmed = true
		if err := x.transition(rec, AlarmConfirmed, stamp, c.Operator, c.Comment); err != nil {
			return err
		}
	default:
		rec.Acked, rec.AckOperator, rec.AckComment, rec.AckUnixNano = true, c.Operator, c.Comment, stamp
		if err := x.transition(rec, AlarmAcknowledged, stamp, c.Operator, c.Comment); err != nil {
			return err
		}
	}
	return x.finish(res)
}

func (a *applier) alarmShelve(c *fsmpb.AlarmShelve, res *Result) error {
	if e := a.alarmOperator(c.AlarmId, c.Operator, c.Comment); e != nil {
		res.Err = e
		return nil
	}
	if c.UntilUnixNano < 0 {
		res.Err = cmdErr(CodeInvalid, "alarm %q: negative shelve end", c.AlarmId)
		return nil
	}
	x, rec, err := a.knownAlarm(c.AlarmId, res)
	if err != nil || rec == nil {
		return err
	}
	if !c.Shelve && c.UntilUnixNano != 0 && rec.ShelvedUntilUnixNano != c.UntilUnixNano {
		// The end of a timed shelve, proposed by the Active when it saw
		// that end pass: the alarm was shelved again (or unshelved)
		// meanwhile, and that shelve is not the one that ended.
		return x.finish(res)
	}
	if rec.Shelved != c.Shelve || (c.Shelve && rec.ShelvedUntilUnixNano != c.UntilUnixNano) {
		kind := AlarmShelved
		rec.Shelved, rec.ShelvedBy, rec.ShelvedUntilUnixNano = c.Shelve, c.Operator, c.UntilUnixNano
		if !c.Shelve {
			kind, rec.ShelvedBy, rec.ShelvedUntilUnixNano = AlarmUnshelved, "", 0
		}
		if err := x.transition(rec, kind, a.cmd.StampUnixNano, c.Operator, c.Comment); err != nil {
			return err
		}
	}
	return x.finish(res)
}

func (a *applier) alarmComment(c *fsmpb.AlarmComment, res *Result) error {
	if e := a.alarmOperator(c.AlarmId, c.Operator, c.Comment); e != nil {
		res.Err = e
		return nil
	}
	if c.Comment == "" {
		res.Err = cmdErr(CodeInvalid, "alarm %q: empty comment", c.AlarmId)
		return nil
	}
	x, rec, err := a.knownAlarm(c.AlarmId, res)
	if err != nil || rec == nil {
		return err
	}
	rec.LastComment, rec.LastCommentBy = c.Comment, c.Operator
	if err := x.transition(rec, AlarmCommented, a.cmd.StampUnixNano, c.Operator, c.Comment); err != nil {
		return err
	}
	return x.finish(res)
}

func (a *applier) alarmHistoryMark(c *fsmpb.AlarmHistoryMark, res *Result) error {
	x, err := a.alarmBuckets()
	if err != nil {
		return err
	}
	if c.Seq > x.logSeq {
		res.Err = cmdErr(CodeInvalid, "alarm history mark %d beyond the alarm log (%d)", c.Seq, x.logSeq)
		return nil
	}
	if c.Seq > getU64(x.ab.Get(alarmsHistoryMark)) {
		if err := x.ab.Put(alarmsHistoryMark, u64(c.Seq)); err != nil {
			return err
		}
	}
	return x.finish(res)
}
