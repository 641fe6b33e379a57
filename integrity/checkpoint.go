package integrity

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/role"
)

// CheckpointState is the FSM side of a cross-node checkpoint.
type CheckpointState interface {
	LocalDigests() <-chan fsm.LocalDigest
	Checkpoints() ([]*fsmpb.CheckpointRecord, error)
	Restores() uint64
}

// Proposer sends a command to the leader (control.Forwarder).
type Proposer interface {
	Propose(ctx context.Context, cmd *fsmpb.Command) (*fsm.Result, error)
}

// CheckpointMetrics say what the newest checkpoints found.
type CheckpointMetrics struct {
	index    prometheus.Gauge
	diverged prometheus.Gauge
	split    prometheus.Gauge
	found    prometheus.Counter
}

// NewCheckpointMetrics registers the checkpoint metrics on reg.
func NewCheckpointMetrics(reg prometheus.Registerer) *CheckpointMetrics {
	m := &CheckpointMetrics{
		index: prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_state_checkpoint_index",
			Help: "Log index of the newest cross-node checkpoint with a verdict."}),
		diverged: prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_state_diverged",
			Help: "1 while the newest checkpoint's verdict says this node's state differs from the majority's (it is fenced and rebuilt)."}),
		split: prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_state_checkpoint_split",
			Help: "1 while the newest checkpoint found the voters' states different with no majority (pair mode): the operator chooses (scadactl check)."}),
		found: prometheus.NewCounter(prometheus.CounterOpts{Name: "scadad_state_divergences_total",
			Help: "Checkpoints whose verdict named this node as diverged, or found no majority."}),
	}
	reg.MustRegister(m.index, m.diverged, m.split, m.found)
	return m
}

// Checkpointer drives the cross-node checkpoints from this node: it
// proposes one when it becomes Active and every interval while it is, and
// from any role once after it starts and after every snapshot it installs;
// it reports its own digest at every checkpoint it applies; and it follows
// the verdicts. A verdict that names this node as diverged fences and
// rebuilds it (rebuild, the scrub's path); a split (two voters
// disagreeing, pair mode) only alerts: the Active keeps serving.
type Checkpointer struct {
	NodeID   string
	Interval time.Duration
	State    CheckpointState
	Propose  Proposer
	Roles    role.Source
	// Voters lists the voters' ids (the raft configuration).
	Voters func() ([]string, error)
	// Rebuild fences and rebuilds a diverged node (Scrubber.Rebuild).
	Rebuild func(ctx context.Context, cause error) bool
	Metrics *CheckpointMetrics
	Log     zerolog.Logger
	Now     func() time.Time
	Tick    time.Duration // how often roles, restores and verdicts are looked at

	// what this process computed: only a verdict on a digest this node
	// computed and reported in this life is acted on (a restored state
	// carries the verdicts of the state it came from).
	mine     map[uint64]string
	pending  []fsm.LocalDigest
	handled  uint64 // newest checkpoint whose verdict was acted on
	restores uint64
	lastAt   time.Time // last checkpoint this node proposed
	want     string    // why a checkpoint is due ("" none)
	wasRole  role.Role
}

// Run drives the checkpoints until ctx ends.
func (c *Checkpointer) Run(ctx context.Context) error {
	c.mine = map[uint64]string{}
	c.restores = c.State.Restores()
	c.want = "node start"
	t := time.NewTicker(c.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case d := <-c.State.LocalDigests():
			c.digested(ctx, d)
		case <-t.C:
		}
		c.step(ctx)
	}
}

func (c *Checkpointer) digested(ctx context.Context, d fsm.LocalDigest) {
	if d.Err != nil {
		c.Log.Error().Err(d.Err).Uint64("checkpoint", d.Index).Msg("this node's state could not be digested at a checkpoint")
		if errors.Is(d.Err, fsm.ErrDamagedState) {
			c.Rebuild(ctx, d.Err)
		}
		return
	}
	c.mine[d.Index] = d.Digest
	for len(c.mine) > fsm.CheckpointsKept {
		delete(c.mine, slices.Min(slices.Collect(maps.Keys(c.mine))))
	}
	c.pending = append(c.pending, d)
	c.Log.Info().Uint64("checkpoint", d.Index).Str("digest", d.Digest).Msg("state digested at a checkpoint; reporting it")
}

// step proposes a checkpoint when one is due, sends pending reports and
// follows the newest verdict.
func (c *Checkpointer) step(ctx context.Context) {
	st := c.Roles.Current()
	if st.Role == role.Active && c.wasRole != role.Active {
		c.want = "new Active"
	}
	c.wasRole = st.Role
	if r := c.State.Restores(); r != c.restores {
		c.restores, c.want = r, "snapshot installed"
	}
	if c.want == "" && st.Role == role.Active && c.Now().Sub(c.lastAt) >= c.Interval {
		c.want = "interval"
	}
	if c.want != "" && (st.Role == role.Active || st.Role == role.Standby || st.Role == role.Witness) {
		c.proposeCheckpoint(ctx, c.want)
	}
	c.sendReports(ctx)
	c.follow(ctx)
}

func (c *Checkpointer) proposeCheckpoint(ctx context.Context, why string) {
	voters, err := c.Voters()
	if err != nil || len(voters) == 0 {
		return
	}
	slices.Sort(voters)
	res, err := c.call(ctx, &fsmpb.Command{Body: &fsmpb.Command_Checkpoint{Checkpoint: &fsmpb.Checkpoint{Voters: voters, Reason: why}}})
	if err != nil {
		var ce *fsm.CommandError
		if errors.As(err, &ce) && ce.Code == fsm.CodeFeatureLevel {
			// A member runs an older release: no checkpoints until all
			// can apply them; try again at the interval.
			c.Log.Debug().Err(err).Msg("checkpoint not proposed: a member does not apply checkpoints yet")
			c.want, c.lastAt = "", c.Now()
			return
		}
		c.Log.Debug().Err(err).Str("why", why).Msg("checkpoint not proposed yet; retrying")
		return
	}
	c.want, c.lastAt = "", c.Now()
	c.Log.Info().Uint64("checkpoint", res.Index).Str("why", why).Strs("voters", voters).Msg("cross-node state checkpoint proposed")
}

func (c *Checkpointer) sendReports(ctx context.Context) {
	var keep []fsm.LocalDigest
	for _, d := range c.pending {
		_, err := c.call(ctx, &fsmpb.Command{Body: &fsmpb.Command_CheckpointReport{CheckpointReport: &fsmpb.CheckpointReport{
			Index: d.Index, NodeId: c.NodeID, Digest: d.Digest}}})
		var ce *fsm.CommandError
		switch {
		case err == nil:
		case errors.As(err, &ce):
			// Refused for good (the checkpoint is no longer kept, this
			// node is not among its voters): nothing to retry.
			c.Log.Warn().Err(err).Uint64("checkpoint", d.Index).Msg("checkpoint report refused")
		default:
			keep = append(keep, d)
		}
	}
	c.pending = keep
}

// call proposes cmd and returns its result, the command's refusal as the
// error.
func (c *Checkpointer) call(ctx context.Context, cmd *fsmpb.Command) (*fsm.Result, error) {
	cmd.Version, cmd.StampUnixNano, cmd.Actor = fsm.CommandVersion, c.Now().UnixNano(), c.NodeID
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := c.Propose.Propose(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return res, res.Err
	}
	return res, nil
}

// follow acts on the newest checkpoint with a verdict.
func (c *Checkpointer) follow(ctx context.Context) {
	recs, err := c.State.Checkpoints()
	if err != nil {
		return
	}
	var rec *fsmpb.CheckpointRecord
	for _, r := range recs {
		if r.MajorityDigest != "" || r.Split {
			rec = r
			break
		}
	}
	if rec == nil {
		return
	}
	c.Metrics.index.Set(float64(rec.Index))
	if rec.Split {
		c.Metrics.split.Set(1)
		c.Metrics.diverged.Set(0)
		if rec.Index > c.handled {
			c.handled = rec.Index
			c.Metrics.found.Inc()
			c.Log.Error().Uint64("checkpoint", rec.Index).Str("reports", describeReports(rec)).
				Msg("STATE DIVERGED: the voters' states differ at a checkpoint and no digest has a majority (two voters): the Active keeps serving; compare the nodes (scadactl check) and rebuild the wrong one (move its data folder aside and start it again)")
		}
		return
	}
	c.Metrics.split.Set(0)
	if !slices.Contains(rec.Diverged, c.NodeID) {
		c.Metrics.diverged.Set(0)
		if len(rec.Diverged) > 0 && rec.Index > c.handled {
			c.handled = rec.Index
			c.Log.Warn().Uint64("checkpoint", rec.Index).Strs("diverged", rec.Diverged).Msg("a checkpoint found another node's state diverged; it fences itself and is rebuilt")
		}
		return
	}
	reported := ""
	for _, r := range rec.Reports {
		if r.NodeId == c.NodeID {
			reported = r.Digest
		}
	}
	if rec.Index <= c.handled || c.mine[rec.Index] == "" || c.mine[rec.Index] != reported {
		return // not this life's digest: a verdict carried in a restored state
	}
	c.handled = rec.Index
	c.Metrics.diverged.Set(1)
	c.Metrics.found.Inc()
	cause := fmt.Errorf("%w: at checkpoint %d this node's state digest %s differs from the majority's %s (%s)",
		fsm.ErrDamagedState, rec.Index, reported, rec.MajorityDigest, describeReports(rec))
	c.Log.Error().Err(cause).Msg("STATE DIVERGED: this node's state differs from the majority's at a checkpoint")
	if c.Rebuild(ctx, cause) {
		c.Metrics.diverged.Set(0)
		c.want = "rebuilt after a divergence"
	}
}

func describeReports(rec *fsmpb.CheckpointRecord) string {
	s := ""
	for i, r := range rec.Reports {
		if i > 0 {
			s += ", "
		}
		s += r.NodeId + "=" + shortDigest(r.Digest)
	}
	return s
}

func shortDigest(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}
