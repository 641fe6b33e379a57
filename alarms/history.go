package alarms

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/storeforward"
)

// HistoryID is the deterministic store-and-forward id of a transition:
// the same on every node and after every failover, so a de-duplicating
// receiver (and the buffer itself) keeps one row per transition.
func HistoryID(alarmID string, seq uint64) string { return fmt.Sprintf("alarm:%s:%d", alarmID, seq) }

// HistoryRecord is one alarm-history message's JSON payload.
type HistoryRecord struct {
	ID         string    `json:"id"`
	AlarmID    string    `json:"alarm_id"`
	Seq        uint64    `json:"seq"`
	Transition string    `json:"transition"`
	Time       time.Time `json:"time"`
	Operator   string    `json:"operator,omitempty"`
	Comment    string    `json:"comment,omitempty"`
	Source     string    `json:"source"`
	Condition  string    `json:"condition,omitempty"`
	Severity   uint32    `json:"severity"`
	Message    string    `json:"message,omitempty"`
	Active     bool      `json:"active"`
	Acked      bool      `json:"acked"`
	State      string    `json:"state,omitempty"`
	Kind       string    `json:"kind"`
}

func historyPayload(t *fsmpb.AlarmTransition) ([]byte, error) {
	st := t.GetState()
	return json.Marshal(HistoryRecord{
		ID: HistoryID(t.AlarmId, t.Seq), AlarmID: t.AlarmId, Seq: t.Seq, Transition: t.Kind,
		Time: time.Unix(0, t.StampUnixNano).UTC(), Operator: t.Operator, Comment: t.Comment,
		Source: st.GetSource(), Condition: st.GetConditionName(), Severity: st.GetSeverity(), Message: st.GetMessage(),
		Active: st.GetActive(), Acked: st.GetAcked(), State: st.GetConditionState(), Kind: st.GetKind(),
	})
}

// logBatch is how many alarm log entries one step reads.
const logBatch = 1000

// unconfirmedRecheck is how soon followState looks again at a new Active
// whose first quorum confirmation has not come yet.
const unconfirmedRecheck = 100 * time.Millisecond

// followState follows the replicated alarm state on every node: it keeps
// the metrics and, on the Active only, emits each transition to the
// alarm-history target once (from the replicated history mark after a
// failover, de-duplicated by id), then raises the mark.
func (s *Service) followState(ctx context.Context) {
	changes, stop := s.opts.State.Changes()
	defer stop()
	last, _, _ := s.opts.State.AlarmLogPosition()
	metricsCursor := last // transitions before this process started are not counted again
	var historyCursor uint64
	wasActive := false
	retry := time.Duration(0)
	for {
		var timer <-chan time.Time
		if retry > 0 {
			timer = s.opts.Clock.After(retry)
		}
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-timer:
		}
		retry = 0
		last, mark, err := s.opts.State.AlarmLogPosition()
		if err != nil {
			s.log.Warn().Err(err).Msg("read the alarm log position")
			continue
		}
		s.countTransitions(&metricsCursor, last)
		s.updateMetrics()
		st, allow, _ := s.active()
		// The emit is an enqueue, committed only through the quorum: an
		// Active whose confirmation is late for a moment still leads and
		// goes on, since no role change follows that moment to look again.
		if !allow && !st.Leading() {
			if wasActive {
				s.log.Info().Msg("alarm history emit stops: no longer the Active")
			}
			wasActive = false
			historyCursor = 0
			continue
		}
		if !wasActive {
			if !allow {
				// A new Active starts (and records the limit alarms it
				// evaluated before) once a quorum has confirmed it; look
				// again soon, as nothing else may wake this loop.
				retry = unconfirmedRecheck
				continue
			}
			// A new Active starts from what the cluster knows was enqueued;
			// anything the old Active enqueued after the mark is a
			// duplicate id the buffer recognises.
			historyCursor = mark
			wasActive = true
			s.RecordEvaluated()
		}
		historyCursor = max(historyCursor, mark)
		if last <= historyCursor {
			continue
		}
		next, err := s.emitHistory(ctx, st, historyCursor, last)
		if next > historyCursor {
			historyCursor = next
		}
		if err != nil || next < last {
			retry = time.Second
			if err != nil {
				s.log.Warn().Err(err).Uint64("from", historyCursor).Msg("alarm history not enqueued; retrying")
			}
		}
	}
}

// emitHistory enqueues the transitions after cursor (up to a batch) and
// commits the history mark; it returns the log seq it got to.
func (s *Service) emitHistory(ctx context.Context, _ role.State, cursor, last uint64) (uint64, error) {
	target := s.config().HistoryTarget
	entries, err := s.opts.State.AlarmLogAfter(cursor, logBatch)
	if err != nil {
		return cursor, err
	}
	if len(entries) == 0 {
		return last, nil
	}
	upTo := entries[len(entries)-1].LogSeq
	if target != "" && s.opts.Enqueuer != nil {
		pending := make([]*storeforward.Pending, 0, len(entries))
		submitter, canSubmit := s.opts.Enqueuer.(interface {
			Submit(ctx context.Context, target string, payload []byte, id string, headers []storeforward.Header) (*storeforward.Pending, error)
		})
		for _, t := range entries {
			payload, err := historyPayload(t)
			if err != nil {
				return cursor, err
			}
			id := HistoryID(t.AlarmId, t.Seq)
			if !canSubmit {
				if _, err := s.opts.Enqueuer.Enqueue(ctx, target, payload, id, nil); err != nil {
					return cursor, fmt.Errorf("enqueue alarm history %s: %w", id, err)
				}
				continue
			}
			p, err := submitter.Submit(ctx, target, payload, id, nil)
			if err != nil {
				return cursor, fmt.Errorf("enqueue alarm history %s: %w", id, err)
			}
			pending = append(pending, p)
		}
		for _, p := range pending {
			if _, err := p.Wait(ctx); err != nil {
				return cursor, fmt.Errorf("enqueue alarm history %s: %w", p.ID(), err)
			}
		}
		s.opts.Metrics.historyEnqueued(len(entries))
	}
	if _, err := s.commit(ctx, &fsmpb.Command{Body: &fsmpb.Command_AlarmHistoryMark{AlarmHistoryMark: &fsmpb.AlarmHistoryMark{Seq: upTo}}}); err != nil {
		// The rows are stored; a failover re-enqueues them (duplicates).
		s.log.Warn().Err(err).Uint64("seq", upTo).Msg("alarm history mark not recorded")
	}
	return upTo, nil
}

func (s *Service) countTransitions(cursor *uint64, last uint64) {
	for *cursor < last {
		entries, err := s.opts.State.AlarmLogAfter(*cursor, logBatch)
		if err != nil || len(entries) == 0 {
			*cursor = last
			return
		}
		for _, t := range entries {
			s.opts.Metrics.transition(t.Kind)
		}
		*cursor = entries[len(entries)-1].LogSeq
	}
}
