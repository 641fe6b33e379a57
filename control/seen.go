package control

import (
	"context"
	"time"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
)

// Proposer commits FSM commands; *Forwarder is one.
type Proposer interface {
	Propose(ctx context.Context, cmd *fsmpb.Command) (*fsm.Result, error)
}

// AppliedWatcher reports the local state machine's applied index as it
// moves; *fsm.FSM is one.
type AppliedWatcher interface {
	Changes() (<-chan uint64, func())
}

// SeenLocally is a Proposer whose writes this node's own state shows by the
// time Propose returns. A follower forwards a write to the leader and hears
// it committed before its own state machine has applied it (it learns the
// commit with the leader's next append, up to a commit timeout later), so
// an operator's `sf discard` through the Standby followed at once by
// `sf list` there showed the discarded messages still parked. Operator
// commands go through a SeenLocally; the enqueue path does not, since
// nobody reads its writes back at once and its callers should not pay the
// wait.
type SeenLocally struct {
	Proposer Proposer
	Applied  AppliedWatcher
	// MaxWait bounds the wait for the local apply after a successful commit
	// (default 2 s). The write is committed either way: a node cut off from
	// the leader right after it answers only serves an older state for a
	// while, which every read of a follower's replica may.
	MaxWait time.Duration
}

// Propose commits cmd and waits until the local state holds its entry.
func (p SeenLocally) Propose(ctx context.Context, cmd *fsmpb.Command) (*fsm.Result, error) {
	res, err := p.Proposer.Propose(ctx, cmd)
	if err != nil || res == nil || res.Index == 0 {
		return res, err
	}
	wait := p.MaxWait
	if wait <= 0 {
		wait = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	waitApplied(ctx, p.Applied, res.Index)
	return res, nil
}

// waitApplied returns once the applied index reaches index or ctx ends.
func waitApplied(ctx context.Context, applied AppliedWatcher, index uint64) bool {
	changes, stop := applied.Changes()
	defer stop()
	for {
		select {
		case at := <-changes:
			if at >= index {
				return true
			}
		case <-ctx.Done():
			return false
		}
	}
}
