package integrity

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
)

// Rejoiner is the part of the raft node a damaged state needs: fence this
// node (raft stops, the role drops, workers stop), discard its raft state
// and FSM, and join afresh, so the leader sends it a snapshot of a healthy
// state.
type Rejoiner interface {
	Rejoin(ctx context.Context, resetFSM func(ctx context.Context) error) error
}

// ScrubMetrics say what the last scrubs found.
type ScrubMetrics struct {
	damaged  prometheus.Gauge
	failures prometheus.Counter
	seconds  prometheus.Gauge
	rebuilds prometheus.Counter
}

// NewScrubMetrics registers the scrub metrics on reg.
func NewScrubMetrics(reg prometheus.Registerer) *ScrubMetrics {
	m := &ScrubMetrics{
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

// Scrubber checks the state file every interval. A damaged state fences
// the node and has it rebuilt from the leader's snapshot where a majority
// can lead without it (witness and strict modes); in pair mode the other
// node cannot lead alone, so it only alerts and the operator chooses.
type Scrubber struct {
	Interval time.Duration
	// BytesPerSecond bounds the scrub's read of the file.
	BytesPerSecond int64
	// Pair is a pair-mode node: the peer cannot lead alone, so a damaged
	// state only alerts.
	Pair  bool
	State *fsm.FSM
	Node  Rejoiner
	// Reset empties the state file before the node rejoins.
	Reset   func(ctx context.Context) error
	Metrics *ScrubMetrics
	Log     zerolog.Logger
	Now     func() time.Time

	// rebuilding is the rebuild under way, which a concurrent Rebuild
	// waits for instead of starting another.
	mu         sync.Mutex
	rebuilding *rebuildRun
}

// rebuildRun is one rebuild; ok is set before done is closed.
type rebuildRun struct {
	done chan struct{}
	ok   bool
}

// Run scrubs every interval until ctx ends.
func (s *Scrubber) Run(ctx context.Context) error {
	tick := time.NewTicker(s.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		s.once(ctx)
	}
}

// once scrubs the state file, and rebuilds it if it is damaged.
func (s *Scrubber) once(ctx context.Context) {
	start := s.Now()
	digest, applied, err := s.State.Scrub(ctx, s.BytesPerSecond)
	switch {
	case err == nil:
		s.Metrics.damaged.Set(0)
		s.Metrics.seconds.Set(s.Now().Sub(start).Seconds())
		s.Log.Debug().Str("digest", digest).Uint64("applied_index", applied).Dur("took", s.Now().Sub(start)).Msg("state scrubbed: whole")
		return
	case errors.Is(err, fsm.ErrDamagedState):
	default:
		if ctx.Err() == nil && !errors.Is(err, fsm.ErrClosed) {
			s.Log.Warn().Err(err).Msg("state scrub did not finish")
		}
		return
	}
	s.Metrics.failures.Inc()
	s.Rebuild(ctx, err)
}

// Rebuild answers a damaged state (found by a scrub, or by bbolt panicking
// in an apply or commit): outside pair mode the node fences itself,
// discards its raft state and state file and rejoins, so the leader sends
// it a healthy snapshot. It reports whether the node was rebuilt; in pair
// mode it is not (the peer cannot lead alone) and the node only alerts.
//
// The same damage reaches it from several places at once (the daemon's
// storage watch after a failed apply or read, the scrub, a checkpoint): a
// call while a rebuild is under way waits for that one and answers as it
// ended, since a second rejoin would discard the state the first was sent.
func (s *Scrubber) Rebuild(ctx context.Context, cause error) bool {
	s.mu.Lock()
	if run := s.rebuilding; run != nil {
		s.mu.Unlock()
		s.Log.Warn().Err(cause).Msg("state damaged while a rebuild is under way; waiting for it")
		select {
		case <-run.done:
			return run.ok
		case <-ctx.Done():
			return false
		}
	}
	run := &rebuildRun{done: make(chan struct{})}
	s.rebuilding = run
	s.mu.Unlock()
	run.ok = s.rebuild(ctx, cause)
	s.mu.Lock()
	s.rebuilding = nil
	s.mu.Unlock()
	close(run.done)
	return run.ok
}

func (s *Scrubber) rebuild(ctx context.Context, cause error) bool {
	s.Metrics.damaged.Set(1)
	if s.Pair {
		s.Log.Error().Err(cause).Msg("STATE DAMAGED: this node's state file cannot be read whole; in pair mode the peer cannot lead alone, so this node keeps its role: compare the nodes (scadactl snapshot save --local on each) and rebuild the damaged one (move its data folder aside and start it again)")
		return false
	}
	s.Log.Error().Err(cause).Msg("STATE DAMAGED: this node's state file cannot be read whole; fencing this node and rejoining the cluster to be sent a healthy snapshot")
	if err := s.Node.Rejoin(ctx, s.Reset); err != nil {
		s.Log.Error().Err(err).Msg("rebuild of the damaged state failed; the node stays fenced: move its data folder aside and start it again")
		return false
	}
	s.Metrics.rebuilds.Inc()
	s.Metrics.damaged.Set(0)
	s.Log.Warn().Msg("damaged state discarded; this node rejoined and is being sent the leader's snapshot")
	return true
}
