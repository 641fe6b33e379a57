package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	controlpb.RegisterControlServer(s, &healAwareControl{Server: srv, heal: h.mgr})
}

// healAwareControl adds the heal to Status and keeps a manual override
// from fighting a merge under way.
type healAwareControl struct {
	*control.Server
	heal *heal.Manager
}

// Status reports the heal progress as part of the override state (what
// scadactl status prints), and still answers while raft is fenced.
func (c *healAwareControl) Status(ctx context.Context, req *controlpb.StatusRequest) (*controlpb.StatusResponse, error) {
	resp, err := c.Server.Status(ctx, req)
	hs := c.heal.Status().String()
	if err != nil {
		if hs == "" {
			return nil, err
		}
		st := c.Server.Roles.Current()
		resp = &controlpb.StatusResponse{NodeId: c.Server.NodeID, Role: st.Role.String(), Mode: c.Server.Mode, Version: c.Server.Version,
			ClusterEpoch: c.Server.State.Meta().ClusterEpoch, AppliedIndex: c.Server.State.Meta().AppliedIndex, LastContactMs: -1, RaftState: "Fenced"}
	}
	if hs != "" {
		if resp.OverrideState != "" {
			resp.OverrideState += "; "
		}
		resp.OverrideState += hs
	}
	return resp, nil
}

// Override refuses while this node is merging into the winner: re-forming
// it alone would undo the heal.
func (c *healAwareControl) Override(ctx context.Context, req *controlpb.OverrideRequest) (*controlpb.OverrideResponse, error) {
	if c.heal.Busy() {
		return nil, status.Errorf(codes.FailedPrecondition, "override on %s: refused, a dual-active heal is merging this node into its peer (%s)",
			c.Server.NodeID, c.heal.Status())
	}
	return c.Server.Override(ctx, req)
}
