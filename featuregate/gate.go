package featuregate

import (
	"context"
	"fmt"

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
}

// Apply commits cmd through Next unless the cluster cannot apply it.
func (g *Gate) Apply(ctx context.Context, cmd []byte) (interface{}, error) {
	need, err := fsm.EntryLevel(cmd)
	if err != nil {
		return &fsm.Result{Err: &fsm.CommandError{Code: fsm.CodeFeatureLevel, Message: err.Error()}}, nil
	}
	if need > 1 {
		if refusal, err := g.check(need); err != nil || refusal != nil {
			return refusal, err
		}
	}
	return g.Next.Apply(ctx, cmd)
}

// check returns the refusal of a command needing level need, or nil.
func (g *Gate) check(need fsm.Level) (*fsm.Result, error) {
	members, err := g.Members()
	if err != nil {
		return nil, fmt.Errorf("feature gate: read the raft configuration: %w", err)
	}
	recs, err := g.Levels.NodeLevels()
	if err != nil {
		return nil, fmt.Errorf("feature gate: %w", err)
	}
	have, low := fsm.ClusterLevel(recs, members)
	if need <= have {
		return nil, nil
	}
	who := fmt.Sprintf("node %s records level %d (%s)", low.NodeID, low.Level, low.Version)
	if low.Version == "" {
		who = fmt.Sprintf("node %s has recorded no feature level (it runs a release before v0.2.0: level 1)", low.NodeID)
	}
	return &fsm.Result{Err: &fsm.CommandError{Code: fsm.CodeFeatureLevel, Message: fmt.Sprintf(
		"the command needs FSM feature level %d (scadad %s or newer on every member); the cluster is at level %d: %s; upgrade it first",
		need, fsm.LevelRelease(need), have, who)}}, nil
}
