package main

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/alarms"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/opcua"
)

// alarmLog is the replicated alarm state the OPC UA server shows;
// *fsm.FSM is one.
type alarmLog interface {
	Alarms() ([]*fsmpb.AlarmRecord, error)
	AlarmLogPosition() (last, historyMark uint64, err error)
	AlarmLogAfter(seq uint64, limit int) ([]*fsmpb.AlarmTransition, error)
	Changes() (<-chan uint64, func())
}

// alarmFeed hands the OPC UA server the replicated alarm state: all of it
// to each new server (SetConditions), then every transition of the alarm
// log as a condition event (ConditionChanged). Every voter runs it, from
// its own copy of the state, so the events (and their EventIds) are the
// same on each.
type alarmFeed struct {
	state   alarmLog
	log     zerolog.Logger
	current func() *opcua.Server
	// wake says a new server was started.
	wake chan struct{}
}

func newAlarmFeed(state alarmLog, log zerolog.Logger, current func() *opcua.Server) *alarmFeed {
	return &alarmFeed{state: state, log: log, current: current, wake: make(chan struct{}, 1)}
}

func (f *alarmFeed) serverStarted() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// alarmLogBatch bounds the transitions read at once.
const alarmLogBatch = 1000

func (f *alarmFeed) run(ctx context.Context) error {
	changes, stop := f.state.Changes()
	defer stop()
	var fed *opcua.Server
	var cursor uint64
	retry := time.NewTicker(time.Second) // a failed read is tried again
	defer retry.Stop()
	for {
		if srv := f.current(); srv != fed {
			fed = nil
			if srv != nil {
				var err error
				if cursor, err = f.seed(srv); err == nil {
					fed = srv
				} else {
					f.log.Warn().Err(err).Msg("OPC UA alarm conditions not loaded; retrying")
				}
			}
		}
		if fed != nil {
			next, err := f.follow(fed, cursor)
			cursor = next
			if err != nil {
				f.log.Warn().Err(err).Msg("OPC UA alarm events: alarm log not read; retrying")
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-f.wake:
		case <-retry.C:
		}
	}
}

// seed loads every condition into srv and returns the log position the
// events follow from: read before the state, so a transition applied in
// between is reported (again) rather than lost.
func (f *alarmFeed) seed(srv *opcua.Server) (uint64, error) {
	last, _, err := f.state.AlarmLogPosition()
	if err != nil {
		return 0, err
	}
	recs, err := f.state.Alarms()
	if err != nil {
		return 0, err
	}
	conds := make([]opcua.Condition, 0, len(recs))
	for _, r := range recs {
		conds = append(conds, conditionOf(r))
	}
	srv.SetConditions(conds)
	return last, nil
}

// follow reports the transitions after cursor and returns the new cursor.
// Transitions the log no longer keeps (it keeps the newest) are not
// replayed: the next ones carry the whole state of their alarm.
func (f *alarmFeed) follow(srv *opcua.Server, cursor uint64) (uint64, error) {
	for {
		ts, err := f.state.AlarmLogAfter(cursor, alarmLogBatch)
		if err != nil {
			return cursor, err
		}
		for _, t := range ts {
			if t.State != nil {
				c := conditionOf(t.State)
				if t.StampUnixNano != 0 {
					c.Time = time.Unix(0, t.StampUnixNano).UTC() // when this transition was made
				}
				srv.ConditionChanged(c)
			}
			cursor = t.LogSeq
		}
		if len(ts) < alarmLogBatch {
			return cursor, nil
		}
	}
}

// conditionOf is an alarm's replicated state as an OPC UA condition.
func conditionOf(r *fsmpb.AlarmRecord) opcua.Condition {
	c := opcua.Condition{
		ID: r.AlarmId, Source: r.Source, Name: r.ConditionName, Message: r.Message,
		Severity: uint16(min(max(r.Severity, 1), 1000)), Limit: r.Kind == alarms.KindLimit, State: r.ConditionState,
		Active: r.Active, Acked: r.Acked, Confirmed: r.Confirmed, Shelved: r.Shelved,
		Seq: r.Seq, Comment: r.LastComment, User: r.LastCommentBy,
	}
	if c.Comment == "" && r.AckComment != "" {
		c.Comment, c.User = r.AckComment, r.AckOperator
	}
	if c.User == "" {
		c.User = r.AckOperator
	}
	if r.TransitionUnixNano != 0 {
		c.Time = time.Unix(0, r.TransitionUnixNano).UTC()
	}
	return c
}
