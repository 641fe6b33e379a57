// Package roletest holds the tests' stand-in for the role as raftnode's
// Acting shows it to side effects: an Active whose quorum confirmation is
// late reads as Detached from Current, while Watch publishes nothing, so
// nothing that follows role changes notices.
package roletest

import (
	"math"
	"sync/atomic"

	"github.com/scadad/scadad/role"
)

// LateConfirmation is a role.Broadcaster whose Current answers Detached,
// Unconfirmed, while the confirmation is late. Make one with New.
type LateConfirmation struct {
	*role.Broadcaster
	late  atomic.Int64 // Current calls still to answer Detached (≤ 0: none)
	asked atomic.Int64
}

// New returns a LateConfirmation publishing initial, confirmed.
func New(initial role.State) *LateConfirmation {
	return &LateConfirmation{Broadcaster: role.NewBroadcaster(initial)}
}

// LateFor makes the next n calls of Current answer Detached.
func (l *LateConfirmation) LateFor(n int64) { l.late.Store(n) }

// Late makes Current answer Detached until Confirmed.
func (l *LateConfirmation) Late() { l.late.Store(math.MaxInt64) }

// Confirmed ends Late.
func (l *LateConfirmation) Confirmed() { l.late.Store(0) }

// Asked is how many calls of Current answered Detached.
func (l *LateConfirmation) Asked() int64 { return l.asked.Load() }

// Current is the published state, Detached while the confirmation is late.
func (l *LateConfirmation) Current() role.State {
	s := l.Broadcaster.Current()
	if l.late.Add(-1) >= 0 {
		l.asked.Add(1)
		s.Role, s.Unconfirmed = role.Detached, true
	}
	return s
}
