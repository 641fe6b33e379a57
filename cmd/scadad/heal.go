package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/control"
	"github.com/scadad/scadad/heal"
	"github.com/scadad/scadad/nodeconfig"
)

// Data-dir layout the heal wipes on a resumed rejoin (see runDaemon).
func fsmPath(cfg *nodeconfig.Config) string { return filepath.Join(cfg.DataDir, "fsm.db") }
func raftDir(cfg *nodeconfig.Config) string { return filepath.Join(cfg.DataDir, "raft") }

// healPrepare runs before the FSM and raft open: it resumes an interrupted
// merge (see heal.PrepareStart) and says whether raft starts fenced.
func healPrepare(cfg *nodeconfig.Config) (bool, error) {
	fenced, err := heal.PrepareStart(cfg.DataDir, fsmPath(cfg), raftDir(cfg))
	if err != nil {
		return false, fmt.Errorf("resume heal: %w", err)
	}
	return fenced, nil
}

// healWiring is the heal's part of the daemon: the manager (detection and
// the loser's merge), the Heal service (the winner's side) and the status
// and override guards on the control API.
type healWiring struct {
	mgr    *heal.Manager
	server *control.HealServer
}

func (d *daemon) newHealWiring(members []control.Member) *healWiring {
	cfg, state, fwd := d.cfg, d.state, d.fwd
	peer := ""
	for _, m := range members {
		if m.ID != cfg.NodeID && !m.Witness {
			peer = m.ID
		}
	}
	if cfg.Cluster.Mode != nodeconfig.ModePair || len(members) != 2 {
		peer = "" // only a pair can be dual-active without an operator
	}
	hlog := d.log.With().Str("part", "heal").Logger()
	mgr := heal.NewManager(heal.Config{
		NodeID:       cfg.NodeID,
		Peer:         peer,
		DataDir:      cfg.DataDir,
		Preferred:    cfg.Cluster.HealPreferred,
		Node:         d.node,
		Roles:        d.roles,
		State:        state,
		Auditor:      fwd,
		Dial:         func(_ context.Context, id string) (controlpb.HealClient, error) { return fwd.HealClient(id) },
		Redial:       fwd.Reset,
		ResetFSM:     func(ctx context.Context) error { return state.Empty(ctx, cfg.DataDir) },
		Metrics:      heal.NewMetrics(d.reg),
		Log:          hlog,
		AbandonAfter: max(3*cfg.Cluster.OverrideAfter.D(), 10*time.Second),
	})
	return &healWiring{
		mgr: mgr,
		server: &control.HealServer{
			Configured: members,
			Facts:      mgr.Facts,
			Absorber:   &heal.Absorber{Self: cfg.NodeID, State: state, Proposer: fwd, Facts: mgr.Facts, OnSplit: mgr.NoteSplit, Log: hlog},
		},
	}
}

// run runs the manager when this node is half of a pair.
func (h *healWiring) run(ctx context.Context) error {
	return h.mgr.Run(ctx)
}

// register adds the Heal service and the heal-aware control service.
func (h *healWiring) register(s *grpc.Server, srv *control.Server) {
	controlpb.RegisterHealServer(s, h.server)
	controlpb.RegisterControlServer(s, &control.HealAware{Server: srv, Heal: h.mgr})
}
