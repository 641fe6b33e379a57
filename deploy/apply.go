package deploy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/siteconfig"
)

// WatchedState is State plus the FSM's change notifications.
type WatchedState interface {
	State
	Changes() (<-chan uint64, func())
	// Restores counts the snapshots that have replaced the state: after
	// one, the deployed revision may stand below the one this node runs.
	Restores() uint64
}

// Applier keeps one node's Holder on the deployed revision.
type Applier struct {
	NodeID   string
	Target   string
	State    WatchedState
	Proposer Proposer
	Holder   *siteconfig.Holder
	Now      func() time.Time
	// RetryEvery is how often a failed apply or an unrecorded ack is tried
	// again when nothing else changes.
	RetryEvery time.Duration
	// StepSpacing is the least time between two Steps that FSM changes
	// trigger (0: none). A change arrives after every applied batch,
	// hundreds a second on every node while producers enqueue, and nearly
	// none is a deploy: a Step per change read the deployment pointer for
	// nothing. Changes within the spacing coalesce into one Step at its end.
	StepSpacing time.Duration
	Log         zerolog.Logger
	// Metrics, when set, follows every Step's outcome.
	Metrics *Metrics

	// lastFailure remembers the failure already reported for a revision so
	// a stuck artifact is not re-acked on every FSM change.
	lastFailure string
	// restores is the State's restore count when the Holder last matched
	// the deployed revision; a newer one allows going back.
	restores uint64
}

// Run applies the current revision and every later one until ctx ends.
func (a *Applier) Run(ctx context.Context) error {
	if a.RetryEvery <= 0 {
		a.RetryEvery = 5 * time.Second
	}
	changes, stop := a.State.Changes()
	defer stop()
	retry := time.NewTicker(a.RetryEvery)
	defer retry.Stop()
	for {
		stepped := time.Now()
		a.Step(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changes:
			if wait := a.StepSpacing - time.Since(stepped); wait > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(wait): // collected unfired since Go 1.23
				}
			}
		case <-retry.C:
		}
	}
}

// Step brings the Holder to the deployed revision if it can, and records
// the outcome in the FSM. It is Run's body, exported for tests.
func (a *Applier) Step(ctx context.Context) {
	if a.Target == "" {
		a.Target = DefaultTarget
	}
	// Only this Applier sets the Holder: have stands until a load succeeds.
	_, have := a.Holder.Current()
	d, err := a.State.Deployment(a.Target)
	if errors.Is(err, fsm.ErrNotFound) || (err == nil && d.Revision == 0) {
		a.Metrics.observe(uint64(have), 0, false)
		return
	}
	if err != nil {
		a.Log.Error().Err(err).Str("target", a.Target).Msg("cannot read the deployment pointer; keeping the current configuration")
		return
	}
	restores := a.State.Restores()
	if uint64(have) == d.Revision && restores == a.restores {
		a.Metrics.observe(d.Revision, d.Revision, false)
		a.ack(ctx, d, true, "")
		return
	}
	// After a restore the deployment is the backup's, which may be older
	// than (or other than, at the same number) the revision running here:
	// the restored state is the one the operator asked for.
	rewind := restores != a.restores
	if err := a.load(d, rewind); err != nil {
		reason := err.Error()
		a.Metrics.observe(uint64(have), d.Revision, true)
		if reason != a.lastFailure {
			a.Log.Error().Err(err).Uint64("revision", d.Revision).Uint64("kept_revision", uint64(have)).Msg("cannot apply the deployed site config; keeping the last good one and retrying")
			a.lastFailure = reason
		}
		a.ack(ctx, d, false, reason)
		return
	}
	a.lastFailure, a.restores = "", restores
	if rewind && d.Revision <= uint64(have) {
		a.Log.Warn().Uint64("revision", d.Revision).Uint64("was_revision", uint64(have)).Str("sha256", d.SHA256).Msg("site config of the restored state applied in place of the newer one running")
	}
	a.Log.Info().Uint64("revision", d.Revision).Str("sha256", d.SHA256).Msg("site config applied")
	a.Metrics.observe(d.Revision, d.Revision, false)
	a.ack(ctx, d, true, "")
}

func (a *Applier) load(d fsm.Deployment, rewind bool) error {
	artifact, err := a.State.Artifact(d.SHA256)
	if err != nil {
		return fmt.Errorf("read artifact %.12s of revision %d: %w", d.SHA256, d.Revision, err)
	}
	set := a.Holder.SetArtifact
	if rewind {
		set = a.Holder.RewindArtifact
	}
	if err := set(artifact, siteconfig.Revision(d.Revision)); err != nil {
		return fmt.Errorf("revision %d: %w", d.Revision, err)
	}
	return nil
}

// ack records this node's result unless the FSM already holds it.
func (a *Applier) ack(ctx context.Context, d fsm.Deployment, ok bool, reason string) {
	for _, prev := range d.Acks {
		if prev.NodeID == a.NodeID && prev.Revision == d.Revision && prev.OK == ok && prev.Reason == reason {
			return
		}
	}
	cmd := &fsmpb.Command{
		Version:       fsm.CommandVersion,
		StampUnixNano: a.Now().UnixNano(),
		Actor:         a.NodeID,
		Body: &fsmpb.Command_DeployAck{DeployAck: &fsmpb.DeployAck{
			Target: a.Target, NodeId: a.NodeID, Revision: d.Revision, Ok: ok, Reason: reason,
		}},
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := a.Proposer.Propose(ctx, cmd)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		a.Log.Debug().Err(err).Uint64("revision", d.Revision).Msg("deploy ack not recorded yet; will retry")
	}
}
