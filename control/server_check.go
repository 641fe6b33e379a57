package control

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/fsm/fsmpb"
)

// Check lists the cross-node state checkpoints from this node's replica:
// every node holds the same records, verdicts included.
func (s *Server) Check(ctx context.Context, _ *controlpb.CheckRequest) (*controlpb.CheckResponse, error) {
	resp := &controlpb.CheckResponse{NodeId: s.NodeID}
	if s.Checkpoints == nil {
		return resp, nil
	}
	recs, err := s.Checkpoints()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read checkpoints: %v", err)
	}
	for _, r := range recs {
		cp := &controlpb.Checkpoint{Index: r.Index, TimeUnixNano: r.StampUnixNano, Actor: r.Actor, Reason: r.Reason,
			Voters: r.Voters, MajorityDigest: r.MajorityDigest, Diverged: r.Diverged, Split: r.Split, Verdict: verdict(r)}
		for _, d := range r.Reports {
			cp.Reports = append(cp.Reports, &controlpb.CheckReport{NodeId: d.NodeId, Digest: d.Digest, TimeUnixNano: d.StampUnixNano})
		}
		resp.Checkpoints = append(resp.Checkpoints, cp)
	}
	return resp, nil
}

// verdict says in words what a checkpoint's reports found.
func verdict(r *fsmpb.CheckpointRecord) string {
	switch {
	case r.Split:
		return "split: the voters' states differ and no digest has a majority; the Active keeps serving, rebuild the wrong node"
	case len(r.Diverged) > 0:
		return "diverged: " + strings.Join(r.Diverged, ", ") + " (fenced and rebuilt from a healthy peer)"
	case r.MajorityDigest != "" && len(r.Reports) == len(r.Voters):
		return "agree"
	case r.MajorityDigest != "":
		return fmt.Sprintf("agree (%d of %d voters reported)", len(r.Reports), len(r.Voters))
	}
	var missing []string
	for _, v := range r.Voters {
		found := false
		for _, d := range r.Reports {
			found = found || d.NodeId == v
		}
		if !found {
			missing = append(missing, v)
		}
	}
	return "waiting for " + strings.Join(missing, ", ")
}
