package control

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/heal"
)

// HealAware is the control service of a node that can heal a dual-active
// split: it adds the heal to Status and keeps a manual override
// from fighting a merge under way.
type HealAware struct {
	*Server
	Heal *heal.Manager
}

// Status reports the heal progress as part of the override state (what
// scadactl status prints), and still answers while raft is fenced.
func (c *HealAware) Status(ctx context.Context, req *controlpb.StatusRequest) (*controlpb.StatusResponse, error) {
	resp, err := c.Server.Status(ctx, req)
	hs := c.Heal.Status().String()
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
func (c *HealAware) Override(ctx context.Context, req *controlpb.OverrideRequest) (*controlpb.OverrideResponse, error) {
	if c.Heal.Busy() {
		return nil, status.Errorf(codes.FailedPrecondition, "override on %s: refused, a dual-active heal is merging this node into its peer (%s)",
			c.Server.NodeID, c.Heal.Status())
	}
	return c.Server.Override(ctx, req)
}
