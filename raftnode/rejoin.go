package raftnode

import (
	"context"
	"errors"
	"fmt"
)

// Fence stops raft on this node but keeps its state: the first step of the
// loser's side of a dual-active heal. The role drops to Detached at once, so
// workers stop delivering before the winner absorbs this node's buffer, and
// no command can commit here any more, so nothing is acknowledged after the
// hand-over read the FSM. The listener keeps answering probes (with no
// voters, so the winner does not re-add this node yet), the override and the
// re-admission are off, and a manual override is refused.
//
// Unfence undoes it (the heal was abandoned); Rejoin ends it (the heal
// finished).
func (n *Node) Fence(ctx context.Context, why string) error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	if n.ctx.Err() != nil {
		return ErrShutdown
	}
	if n.fenced.Load() {
		return nil
	}
	n.log.Warn().Str("why", why).Msg("FENCE: stopping raft on this node for a dual-active heal; workers stop now")
	n.fenced.Store(true)
	n.setRecovering(true)
	n.refreshRole()
	if err := n.stopRaft(); err != nil {
		// The role is already Detached and raft is gone from the node's
		// view; a failed shutdown leaves nothing that could commit.
		n.log.Error().Err(err).Msg("fence: raft shutdown reported an error")
	}
	n.wake()
	return ctx.Err()
}

// Unfence restarts raft on the state Fence kept (or that StartFenced left
// unstarted): the heal was abandoned, and this node carries on as the
// cluster it was.
func (n *Node) Unfence(ctx context.Context) error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	if n.ctx.Err() != nil {
		return ErrShutdown
	}
	if !n.fenced.Load() {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("unfence: %w", err)
	}
	n.log.Warn().Msg("UNFENCE: the heal was abandoned; restarting raft on this node's own state")
	if err := n.startRaft(); err != nil {
		return fmt.Errorf("unfence: %w", err)
	}
	// Silence measured before or during the fence must not trigger an
	// override the moment raft is back.
	n.contact.restartWindow()
	n.fenced.Store(false)
	n.setRecovering(false)
	n.wake()
	return nil
}

// Fenced reports whether raft is stopped for a heal.
func (n *Node) Fenced() bool { return n.fenced.Load() }

// startFenced is New's path for Config.StartFenced: stores and listener are
// open, raft is not started.
func (n *Node) startFenced() {
	n.fenced.Store(true)
	n.setRecovering(true)
	n.log.Warn().Msg("starting fenced: an interrupted dual-active heal resumes before raft runs")
}

// errFenced is what operations that need raft say while fenced.
var errFenced = errors.New("raft is stopped for a dual-active heal")

// FencedError reports whether err came from a fenced node.
func FencedError(err error) bool { return errors.Is(err, errFenced) }
