package main

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/nodeconfig"
)

// rejoiner is the part of the raft node a damaged state needs: fence this
// node (raft stops, the role drops, workers stop), discard its raft state
// and FSM, and join afresh, so the leader sends it a snapshot of a healthy
// state.
type rejoiner interface {
	Rejoin(ctx context.Context, resetFSM func(ctx context.Context) error) error
}

// scrubMetrics say what the last scrubs found.
type scrubMetrics struct {
	damaged  prometheus.Gauge
	failures prometheus.Counter
	seconds  prometheus.Gauge
	rebuilds prometheus.Counter
}

func newScrubMetrics(reg prometheus.Registerer) *scrubMetrics {
	m := &scrubMetrics{
		damaged: prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_state_damaged",
			Help: "1 while the last scrub or open of this node's state file found it damaged (until a rebuild or a clean scrub)."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "scadad_state_scrub_failures_total",
			Help: "Scrubs of the state file that found it damaged."}),
		seconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_state_scrub_seconds",
			Help: "How long the last complete scrub of the state file took."}),
		rebuilds: prometheus.NewCounter(prometheus.CounterOpts{Name: "scadad_state_rebuilds_total",
			Help: "Times this node discarded a damaged state and rejoined to be sent a healthy one."}),
	}
	reg.MustRegister(m.damaged, m.failures, m.seconds, m.rebuilds)
	return m
}

// scrubber checks the state file every interval. A damaged state fences
// the node and has it rebuilt from the leader's snapshot where a majority
// can lead without it (witness and strict modes); in pair mode the other
// node cannot lead alone, so it only alerts and the operator chooses.
type scrubber struct {
	cfg     nodeconfig.State
	pair    bool
	state   *fsm.FSM
	node    rejoiner
	reset   func(ctx context.Context) error
	metrics *scrubMetrics
	log     zerolog.Logger
	now     func() time.Time
}

func (s *scrubber) run(ctx context.Context) error {
	everyTick(ctx, s.cfg.ScrubInterval.D(), func() bool {
		s.once(ctx)
		return ctx.Err() == nil
	})
	return nil
}

// once scrubs the state file, and rebuilds it if it is damaged.
func (s *scrubber) once(ctx context.Context) {
	start := s.now()
	digest, applied, err := s.state.Scrub(ctx, s.cfg.ScrubBytesPerSecond)
	switch {
	case err == nil:
		s.metrics.damaged.Set(0)
		s.metrics.seconds.Set(s.now().Sub(start).Seconds())
		s.log.Debug().Str("digest", digest).Uint64("applied_index", applied).Dur("took", s.now().Sub(start)).Msg("state scrubbed: whole")
		return
	case errors.Is(err, fsm.ErrDamagedState):
	default:
		if ctx.Err() == nil && !errors.Is(err, fsm.ErrClosed) {
			s.log.Warn().Err(err).Msg("state scrub did not finish")
		}
		return
	}
	s.metrics.failures.Inc()
	s.rebuild(ctx, err)
}

// rebuild answers a damaged state (found by a scrub, or by bbolt panicking
// in an apply or commit): outside pair mode the node fences itself,
// discards its raft state and state file and rejoins, so the leader sends
// it a healthy snapshot. It reports whether the node was rebuilt; in pair
// mode it is not (the peer cannot lead alone) and the node only alerts.
func (s *scrubber) rebuild(ctx context.Context, cause error) bool {
	s.metrics.damaged.Set(1)
	if s.pair {
		s.log.Error().Err(cause).Msg("STATE DAMAGED: this node's state file cannot be read whole; in pair mode the peer cannot lead alone, so this node keeps its role: compare the nodes (scadactl snapshot save --local on each) and rebuild the damaged one (move its data folder aside and start it again)")
		return false
	}
	s.log.Error().Err(cause).Msg("STATE DAMAGED: this node's state file cannot be read whole; fencing this node and rejoining the cluster to be sent a healthy snapshot")
	if err := s.node.Rejoin(ctx, s.reset); err != nil {
		s.log.Error().Err(err).Msg("rebuild of the damaged state failed; the node stays fenced: move its data folder aside and start it again")
		return false
	}
	s.metrics.rebuilds.Inc()
	s.metrics.damaged.Set(0)
	s.log.Warn().Msg("damaged state discarded; this node rejoined and is being sent the leader's snapshot")
	return true
}
