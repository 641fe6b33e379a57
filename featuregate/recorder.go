package featuregate

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/role"
)

// Proposer commits a command through the leader, from any node.
type Proposer interface {
	Propose(ctx context.Context, cmd *fsmpb.Command) (*fsm.Result, error)
}

// Recorder keeps this node's feature level recorded in the FSM. It
// records once a leader is known and again at every change of leader: the
// gate reads the leader's replica, and one that was a release before
// v0.2.0 when a record was committed refused it (it kept no records), so a
// new leader learns every member's level from them again. Between leader
// changes it checks the local replica every Every and records when its
// own record is missing or differs.
type Recorder struct {
	NodeID  string
	Level   fsm.Level
	Version string
	Propose Proposer
	Local   Levels
	Roles   role.Source
	// Every is how often the local record is checked (default 1 min);
	// Retry how soon a failed record is tried again (default 5 s).
	Every, Retry time.Duration
	Now          func() time.Time
	Log          zerolog.Logger
}

// Run records until ctx ends.
func (r *Recorder) Run(ctx context.Context) error {
	every, retry := r.Every, r.Retry
	if every <= 0 {
		every = time.Minute
	}
	if retry <= 0 {
		retry = 5 * time.Second
	}
	changes, stop := r.Roles.Watch()
	defer stop()
	var leader string // the leader the record was last committed under
	pending := true   // a record is due
	tick := time.NewTimer(0)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case st := <-changes:
			if st.Leader != "" && st.Leader != leader {
				pending = true
				tick.Reset(0)
			}
			continue
		case <-tick.C:
		}
		st := r.Roles.Current()
		if st.Leader == "" {
			tick.Reset(retry)
			continue
		}
		if !pending && !r.localDiffers() {
			tick.Reset(every)
			continue
		}
		if err := r.record(ctx); err != nil {
			r.Log.Warn().Err(err).Msg("feature level not recorded; retrying")
			tick.Reset(retry)
			continue
		}
		leader, pending = st.Leader, false
		tick.Reset(every)
	}
}

// localDiffers reports whether this node's replica lacks its record as it
// should read.
func (r *Recorder) localDiffers() bool {
	recs, err := r.Local.NodeLevels()
	if err != nil {
		return true
	}
	for _, rec := range recs {
		if rec.NodeID == r.NodeID {
			return rec.Level != r.Level || rec.Version != r.Version
		}
	}
	return true
}

func (r *Recorder) record(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := r.Propose.Propose(ctx, &fsmpb.Command{
		StampUnixNano: r.Now().UnixNano(),
		Actor:         r.NodeID,
		Body: &fsmpb.Command_RecordFeatures{RecordFeatures: &fsmpb.RecordFeatures{
			NodeId: r.NodeID, Level: uint32(r.Level), Version: r.Version,
		}},
	})
	if err != nil {
		return err
	}
	if errors.Is(res.Err, fsm.ErrDecode) {
		// The leader runs a release before v0.2.0: it committed the
		// record, which the nodes that know it keep. Not an error.
		r.Log.Info().Msg("the leader predates feature levels; this node's level is recorded on the members that keep records")
		return nil
	}
	if res.Err != nil {
		return res.Err
	}
	r.Log.Debug().Uint32("level", uint32(r.Level)).Msg("feature level recorded")
	return nil
}
