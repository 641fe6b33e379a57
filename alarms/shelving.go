package alarms

import (
	"context"
	"time"

	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/clock"
)

// ShelveExpiryOperator is the operator of the unshelve that ends a timed
// shelve (the alarm's history row names it).
const ShelveExpiryOperator = "scadad"

// shelveRecheck is how often a node that is not the Active looks again:
// it may become the Active with a shelve already past its end.
const shelveRecheck = time.Second

// expireShelves ends timed shelves: when a shelved alarm's end has passed,
// the Active proposes its unshelve (alarm_shelve, shelve false, with the
// end it saw), a replicated transition like an operator's. The FSM reads
// no clock: it applies the unshelve only if the alarm is still shelved
// until that end, so a shelve renewed meanwhile stays.
func (s *Service) expireShelves(ctx context.Context) {
	changes, stop := s.opts.State.Changes()
	defer stop()
	for {
		next := s.unshelveDue(ctx)
		var timer clock.Timer
		var due <-chan time.Time
		if !next.IsZero() {
			wait := next.Sub(s.opts.Clock.Now())
			if _, ok, _ := s.active(); !ok {
				// Not the Active: ends that passed are not this node's
				// to propose, until it becomes the Active.
				wait = shelveRecheck
			}
			timer = s.opts.Clock.NewTimer(max(wait, 0))
			due = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-changes:
		case <-due:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// unshelveDue proposes, on the Active, the end of every timed shelve that
// has passed, and returns the next end still to come (zero: none).
func (s *Service) unshelveDue(ctx context.Context) time.Time {
	recs, err := s.opts.State.Alarms()
	if err != nil {
		s.log.Warn().Err(err).Msg("read the alarms to end timed shelves; retrying")
		return s.opts.Clock.Now().Add(shelveRecheck)
	}
	now := s.opts.Clock.Now()
	_, active, _ := s.active()
	var next time.Time
	for _, r := range recs {
		if !r.Shelved || r.ShelvedUntilUnixNano <= 0 {
			continue
		}
		end := time.Unix(0, r.ShelvedUntilUnixNano)
		if end.After(now) || !active {
			if next.IsZero() || end.Before(next) {
				next = end
			}
			continue
		}
		_, err := s.commit(ctx, &fsmpb.Command{Actor: ShelveExpiryOperator, Body: &fsmpb.Command_AlarmShelve{AlarmShelve: &fsmpb.AlarmShelve{
			AlarmId: r.AlarmId, Operator: ShelveExpiryOperator, Shelve: false, UntilUnixNano: r.ShelvedUntilUnixNano, Comment: "timed shelve ended"}}})
		if err != nil {
			s.log.Warn().Err(err).Str("alarm", r.AlarmId).Msg("timed shelve not ended; retrying")
			if retry := now.Add(shelveRecheck); next.IsZero() || retry.Before(next) {
				next = retry
			}
			continue
		}
		s.log.Info().Str("alarm", r.AlarmId).Time("until", end).Msg("timed shelve ended: alarm unshelved")
	}
	return next
}
