package featuregate

import (
	"context"
	"fmt"
	"time"

	"github.com/scadad/scadad/fsm"
)

// Applier commits encoded commands through the local raft node (the
// leader).
type Applier interface {
	Apply(ctx context.Context, cmd []byte) (interface{}, error)
}

// Levels is the FSM's record of the members' feature levels.
type Levels interface {
	NodeLevels() ([]fsm.NodeLevel, error)
}

// Gate is an Applier that answers a command needing a feature level above
// the cluster's with a refusal (an *fsm.Result whose Err is a
// *fsm.CommandError of code fsm.CodeFeatureLevel) instead of committing it.
// Level-1 commands, every command of v0.1.0, pass without a look.
type Gate struct {
	Next   Applier
	Levels Levels
	// Members lists the node ids in the raft configuration.
	Members func() ([]string, error)
	// Changes, when set, subscribes to the replica's applied index (as
	// fsm.FSM.Changes). A node records its level a moment after it first
	// hears a leader, so a command just after the cluster forms or a
	// member joins would otherwise be refused for a member that has the
	// level and has not said so yet: with Changes the gate waits up to
	// RecordWait (default 2 s, well inside the 5 s the node's own
	// proposers allow a command, so they see the refusal rather than a
	// timeout; never past the caller's deadline) for a member with no
	// record at all before it refuses.
	Changes    func() (<-chan uint64, func())
	RecordWait time.Duration
}

// Apply commits cmd through Next unless the cluster cannot apply it.
func (g *Gate) Apply(ctx context.Context, cmd []byte) (interface{}, error) {
	need, err := fsm.EntryLevel(cmd)
	if err != nil {
		return &fsm.Result{Err: &fsm.CommandError{Code: fsm.CodeFeatureLevel, Message: err.Error()}}, nil
	}
	if need > 1 {
		if refusal, err := g.admit(ctx, need); err != nil || refusal != nil {
			return refusal, err
		}
	}
	return g.Next.Apply(ctx, cmd)
}

// admit returns the refusal of a command needing level need, or nil,
// waiting for a member that has recorded nothing yet.
func (g *Gate) admit(ctx context.Context, need fsm.Level) (*fsm.Result, error) {
	refusal, unrecorded, err := g.check(need)
	if err != nil || refusal == nil || !unrecorded || g.Changes == nil {
		return refusal, err
	}
	wait := g.RecordWait
	if wait <= 0 {
		wait = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	applied, stop := g.Changes()
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return refusal, nil
		case <-applied:
		}
		if refusal, unrecorded, err = g.check(need); err != nil || refusal == nil || !unrecorded {
			return refusal, err
		}
	}
}

// check returns the refusal of a command needing level need, or nil, and
// whether the member that holds the cluster back has no record at all.
func (g *Gate) check(need fsm.Level) (refusal *fsm.Result, unrecorded bool, err error) {
	members, err := g.Members()
	if err != nil {
		return nil, false, fmt.Errorf("feature gate: read the raft configuration: %w", err)
	}
	recs, err := g.Levels.NodeLevels()
	if err != nil {
		return nil, false, fmt.Errorf("feature gate: %w", err)
	}
	have, low := fsm.ClusterLevel(recs, members)
	if need <= have {
		return nil, false, nil
	}
	who := fmt.Sprintf("node %s records level %d (%s)", low.NodeID, low.Level, low.Version)
	if low.Version == "" {
		who = fmt.Sprintf("node %s has recorded no feature level (it runs a release before v0.2.0: level 1, or it has not reached the leader since it joined)", low.NodeID)
	}
	return &fsm.Result{Err: &fsm.CommandError{Code: fsm.CodeFeatureLevel, Message: fmt.Sprintf(
		"the command needs FSM feature level %d (scadad %s or newer on every member); the cluster is at level %d: %s; upgrade it first",
		need, fsm.LevelRelease(need), have, who)}}, low.Version == "", nil
}
