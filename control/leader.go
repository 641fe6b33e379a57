package control

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/role"
)

// KindLeaderElected is the audit kind of a new term's leader.
const KindLeaderElected = "leader.elected"

// Causes a leader.elected entry names.
const (
	CausePlanned     = "planned failover"
	CauseLostContact = "lost contact"
	CauseOverride    = "override"
	CauseHeal        = "heal"
	CauseFirst       = "first leader"
)

// leaderScanLimit bounds how far back an election looks for the previous
// leader and the cause: a busy site's parking and deploys write audit
// entries too, and the scan runs on the new leader while it takes over.
const leaderScanLimit = 5000

// AuditReader reads the audit trail from the newest entry backwards.
type AuditReader interface {
	AuditNewestFirst(fn func(fsm.AuditEntry) bool) error
}

// Auditor commits an audit entry.
type Auditor interface {
	Audit(ctx context.Context, actor, kind, detail string) error
}

// LeaderAudit records a leader.elected entry for every term this node
// becomes Active in, so a crash failover shows in the audit trail (and the
// status page's timeline) as an override or a planned failover does.
type LeaderAudit struct {
	NodeID string
	Roles  RoleSource
	State  AuditReader
	Audit  Auditor
	Log    zerolog.Logger
	// Retry is the pause before another attempt at an entry that did not
	// commit while this node stays Active in the same term.
	Retry time.Duration
	// Now is the clock an operator's failover request is dated against.
	Now func() time.Time
}

// plannedWithin is how recent an operator's failover request must be for
// the next leader to count as its outcome: a transfer that failed must not
// label a later crash failover as planned.
const plannedWithin = time.Minute

// Run records entries until ctx ends.
func (l *LeaderAudit) Run(ctx context.Context) error {
	states, stop := l.Roles.Watch()
	defer stop()
	retry := l.Retry
	if retry <= 0 {
		retry = time.Second
	}
	var done uint64 // the last term recorded (or found recorded)
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-states:
		case <-timer:
			timer = nil
		}
		st := l.Roles.Current()
		if st.Role != role.Active || st.Epoch.Term == done {
			continue
		}
		recorded, err := l.record(ctx, st.Epoch.Term)
		if err != nil {
			l.Log.Warn().Err(err).Uint64("term", st.Epoch.Term).Msg("leader.elected audit entry not recorded; retrying while this node stays Active")
			timer = time.After(retry)
			continue
		}
		if recorded {
			done = st.Epoch.Term
		}
	}
}

// record commits the entry for term unless the trail already has it.
func (l *LeaderAudit) record(ctx context.Context, term uint64) (bool, error) {
	prev, cause, already, err := l.look(term)
	if err != nil {
		return false, err
	}
	if already {
		return true, nil
	}
	detail := LeaderElectedDetail(term, prev, cause)
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := l.Audit.Audit(actx, l.NodeID, KindLeaderElected, detail); err != nil {
		return false, fmt.Errorf("record %s %s: %w", KindLeaderElected, detail, err)
	}
	l.Log.Info().Uint64("term", term).Str("previous", prev).Str("cause", cause).Msg("recorded leader.elected")
	return true, nil
}

// look reads the trail back to the newest leader.elected entry: who led
// before, and what happened since (an operator's failover, an override by
// this node, a heal). already says term's entry is there.
func (l *LeaderAudit) look(term uint64) (prev, cause string, already bool, err error) {
	planned, override, heal := false, false, false
	found := false
	n := 0
	err = l.State.AuditNewestFirst(func(e fsm.AuditEntry) bool {
		n++
		switch {
		case e.Kind == KindLeaderElected:
			if t, ok := ParseLeaderElected(e.Detail); ok && t.Term == term && e.Actor == l.NodeID {
				already = true
			}
			prev, found = e.Actor, true
			return false
		case strings.HasPrefix(e.Kind, "heal."):
			heal = true
		case e.Kind == "failover":
			planned = planned || l.Now().Sub(e.At) < plannedWithin
		case e.Kind == "override" && strings.Contains(e.Detail, "by node "+l.NodeID+":"):
			override = true
		}
		return n < leaderScanLimit
	})
	if err != nil {
		return "", "", false, fmt.Errorf("read the audit trail for the previous leader: %w", err)
	}
	switch {
	case heal:
		cause = CauseHeal
	case override:
		cause = CauseOverride
	case planned:
		cause = CausePlanned
	case !found:
		cause = CauseFirst
	default:
		cause = CauseLostContact
	}
	return prev, cause, already, nil
}

// LeaderElected is what a leader.elected entry's detail says.
type LeaderElected struct {
	Term     uint64
	Previous string // empty when none was recorded
	Cause    string
}

// LeaderElectedDetail formats a leader.elected entry's detail; the entry's
// actor is the new leader.
func LeaderElectedDetail(term uint64, prev, cause string) string {
	if prev == "" {
		prev = "none"
	}
	return fmt.Sprintf("term %d, previous leader %s, cause %s", term, prev, cause)
}

// ParseLeaderElected reads LeaderElectedDetail's text.
func ParseLeaderElected(detail string) (LeaderElected, bool) {
	var out LeaderElected
	rest, ok := strings.CutPrefix(detail, "term ")
	if !ok {
		return out, false
	}
	num, rest, ok := strings.Cut(rest, ", previous leader ")
	if !ok {
		return out, false
	}
	if _, err := fmt.Sscanf(num, "%d", &out.Term); err != nil {
		return out, false
	}
	prev, cause, ok := strings.Cut(rest, ", cause ")
	if !ok {
		return out, false
	}
	if prev != "none" {
		out.Previous = prev
	}
	out.Cause = cause
	return out, true
}
