package control

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/deploy"
	"github.com/scadad/scadad/fsm"
)

// actor names the caller by its certificate's common name.
func actor(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "unknown"
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
		return ti.State.PeerCertificates[0].Subject.CommonName
	}
	return "unknown"
}

// deployStatus maps deploy and FSM errors to gRPC codes.
func deployStatus(what string, err error) error {
	var invalid *deploy.InvalidError
	switch {
	case errors.As(err, &invalid):
		return status.Errorf(codes.InvalidArgument, "%s: %v", what, err)
	case errors.Is(err, fsm.ErrRevisionMismatch):
		return status.Errorf(codes.FailedPrecondition, "%s: %v", what, err)
	case errors.Is(err, fsm.ErrNotFound):
		return status.Errorf(codes.NotFound, "%s: %v", what, err)
	case status.Code(err) == codes.Unavailable:
		return err
	}
	return status.Errorf(codes.Internal, "%s: %v", what, err)
}

// DeployPush stores an artifact and moves the pointer, on the leader.
func (s *Server) DeployPush(ctx context.Context, req *controlpb.DeployPushRequest) (*controlpb.DeployPushResponse, error) {
	if c, fctx, err := s.leaderOr(ctx); err != nil || c != nil {
		if err != nil {
			return nil, err
		}
		return c.DeployPush(fctx, req)
	}
	pr := deploy.PushRequest{Target: req.Target, Artifact: req.Artifact, Message: req.Message, Actor: s.author(ctx)}
	if req.HasExpectRevision {
		pr.Expect = &req.ExpectRevision
	}
	res, err := s.Pusher.Push(ctx, pr)
	if err != nil {
		return nil, deployStatus("deploy push", err)
	}
	resp := &controlpb.DeployPushResponse{Revision: res.Revision, Sha256: res.SHA256, Noop: res.NoChange}
	if res.NoChange {
		resp.Detail = "identical content is already deployed"
	}
	return resp, nil
}

// DeployRollback points the target back at an earlier artifact.
func (s *Server) DeployRollback(ctx context.Context, req *controlpb.DeployRollbackRequest) (*controlpb.DeployPushResponse, error) {
	if c, fctx, err := s.leaderOr(ctx); err != nil || c != nil {
		if err != nil {
			return nil, err
		}
		return c.DeployRollback(fctx, req)
	}
	res, err := s.Pusher.Rollback(ctx, req.Target, req.ToRevision, s.author(ctx))
	if err != nil {
		return nil, deployStatus("deploy rollback", err)
	}
	return &controlpb.DeployPushResponse{Revision: res.Revision, Sha256: res.SHA256, Noop: res.NoChange}, nil
}

func target(t string) string {
	if t == "" {
		return deploy.DefaultTarget
	}
	return t
}

// DeployHistory lists a target's revisions from this node's replica.
func (s *Server) DeployHistory(ctx context.Context, req *controlpb.DeployHistoryRequest) (*controlpb.DeployHistoryResponse, error) {
	d, err := s.deployment("deploy history", req.Target)
	if err != nil {
		return fromLeader(s, ctx, err, func(c controlpb.ControlClient, ctx context.Context) (*controlpb.DeployHistoryResponse, error) {
			return c.DeployHistory(ctx, req)
		})
	}
	resp := &controlpb.DeployHistoryResponse{Current: d.Revision}
	for _, r := range d.History {
		resp.Revisions = append(resp.Revisions, &controlpb.DeployRevision{
			Revision: r.Revision, Sha256: r.SHA256, Actor: r.Actor, TimeUnixNano: r.At.UnixNano(), Message: r.Message, RollbackOf: r.RollbackOf,
		})
	}
	return resp, nil
}

// DeployStatus reports each node's applied revision and result.
func (s *Server) DeployStatus(ctx context.Context, req *controlpb.DeployStatusRequest) (*controlpb.DeployStatusResponse, error) {
	d, err := s.deployment("deploy status", req.Target)
	if err != nil {
		return fromLeader(s, ctx, err, func(c controlpb.ControlClient, ctx context.Context) (*controlpb.DeployStatusResponse, error) {
			return c.DeployStatus(ctx, req)
		})
	}
	resp := &controlpb.DeployStatusResponse{Current: d.Revision, Sha256: d.SHA256}
	for _, a := range d.Acks {
		resp.Nodes = append(resp.Nodes, &controlpb.DeployNodeStatus{NodeId: a.NodeID, Revision: a.Revision, Ok: a.OK, Reason: a.Reason, TimeUnixNano: a.At.UnixNano()})
	}
	return resp, nil
}

// DeployGet returns the artifact of a revision.
func (s *Server) DeployGet(ctx context.Context, req *controlpb.DeployGetRequest) (*controlpb.DeployGetResponse, error) {
	d, err := s.deployment("deploy get", req.Target)
	if err != nil {
		return fromLeader(s, ctx, err, func(c controlpb.ControlClient, ctx context.Context) (*controlpb.DeployGetResponse, error) {
			return c.DeployGet(ctx, req)
		})
	}
	rev := req.Revision
	if rev == 0 {
		rev = d.Revision
	}
	for _, r := range d.History {
		if r.Revision == rev {
			art, err := s.State.Artifact(r.SHA256)
			if err != nil {
				return nil, status.Errorf(codes.DataLoss, "deploy get %d: artifact %.12s: %v", rev, r.SHA256, err)
			}
			return &controlpb.DeployGetResponse{Revision: rev, Artifact: art, Sha256: r.SHA256}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "deploy get: no revision %d", rev)
}

// fromLeader asks the leader (call) when this node's replica says nothing
// has been deployed (local is NotFound) and this node does not lead: a
// node just restarted, or cut off from the leader's replication, may not
// have applied the deploys yet, and "nothing has been deployed" from it
// would mislead. When this node leads, local is another error, or no
// leader is known or reachable, the local answer stands at once.
func fromLeader[T any](s *Server, ctx context.Context, local error, call func(controlpb.ControlClient, context.Context) (T, error)) (T, error) {
	var none T
	if st := s.Roles.Current(); status.Code(local) != codes.NotFound || st.Leader == "" || st.Leader == s.NodeID {
		return none, local
	}
	c, fctx, err := s.leaderOr(ctx)
	if err != nil || c == nil {
		return none, local
	}
	resp, err := call(c, fctx)
	if err != nil && retryable(err) {
		return none, local
	}
	return resp, err
}

// deployment reads target's deployment pointer; before the first push it
// says so instead of passing on the store's "not found".
func (s *Server) deployment(what, name string) (fsm.Deployment, error) {
	d, err := s.State.Deployment(target(name))
	switch {
	case errors.Is(err, fsm.ErrNotFound) || (err == nil && d.Revision == 0):
		return fsm.Deployment{}, status.Errorf(codes.NotFound, "%s: nothing has been deployed to %q yet (scadactl deploy push FILE)", what, target(name))
	case err != nil:
		return fsm.Deployment{}, deployStatus(what, err)
	}
	return d, nil
}
