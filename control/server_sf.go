package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/role"
)

// SFEnqueue stores one message; it answers once the message is committed.
func (s *Server) SFEnqueue(ctx context.Context, req *controlpb.SFEnqueueRequest) (*controlpb.SFEnqueueResponse, error) {
	if req.Target == "" {
		return nil, status.Error(codes.InvalidArgument, "sf enqueue: target is required")
	}
	id, dup, err := s.SF.Enqueue(ctx, req.Target, req.Payload, req.Id)
	if err != nil {
		return nil, err
	}
	return &controlpb.SFEnqueueResponse{Id: id, Duplicate: dup}, nil
}

// readLeaderWait is how long a read that prefers the Active's answer waits
// for one to be known (an election) before answering from this node.
const readLeaderWait = time.Second

// maxStreamInFlight bounds the messages of one SFEnqueueStream submitted
// and not yet answered; a producer that sends faster waits.
const maxStreamInFlight = 1024

// SFEnqueueStream stores every message sent on the stream and answers each
// in the order sent. Messages are handed to the group committer as they
// arrive, so a producer's pipelined messages share raft entries.
func (s *Server) SFEnqueueStream(stream controlpb.Control_SFEnqueueStreamServer) error {
	ctx := stream.Context()
	waits := make(chan func(context.Context) (string, bool, error), maxStreamInFlight)
	sent := make(chan error, 1)
	go func() {
		var sendErr error
		for wait := range waits {
			id, dup, err := wait(ctx)
			if sendErr != nil {
				continue // the stream is broken; let the reader end
			}
			resp := &controlpb.SFEnqueueStreamResponse{Id: id, Duplicate: dup}
			if err != nil {
				st := status.Convert(err)
				resp.Code, resp.Error = int32(st.Code()), st.Message()
			}
			sendErr = stream.Send(resp)
		}
		sent <- sendErr
	}()
	var recvErr error
	for {
		req, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				recvErr = err
			}
			break
		}
		wait := refusal(req.Id, status.Error(codes.InvalidArgument, "sf enqueue: target is required"))
		if req.Target != "" {
			wait = s.SF.Submit(ctx, req.Target, req.Payload, req.Id)
		}
		waits <- wait
	}
	close(waits)
	sendErr := <-sent
	if recvErr != nil {
		return recvErr
	}
	return sendErr
}

// refusal is the outcome of a message refused before it was submitted.
func refusal(id string, err error) func(context.Context) (string, bool, error) {
	return func(context.Context) (string, bool, error) { return id, false, err }
}

// SFStats reports per-target buffer figures. Only the Active delivers, so
// only it knows the delivery rate and the last error: a Standby that
// answered from its own replica would show a failing target as quiet, so it
// asks the Active. Without an Active to ask (or when the request says
// local) the answer is this node's replica, marked not live unless this
// node is the Active.
func (s *Server) SFStats(ctx context.Context, req *controlpb.SFStatsRequest) (*controlpb.SFStatsResponse, error) {
	if !req.Local {
		resp, err := s.activeSFStats(ctx, req)
		if err == nil {
			return resp, nil
		}
		s.Log.Info().Err(err).Msg("sf stats: no Active to ask; answering from this node's replica")
	}
	return s.localSFStats(ctx)
}

// activeSFStats answers as the Active or asks it, waiting at most
// readLeaderWait for one to be known.
func (s *Server) activeSFStats(ctx context.Context, req *controlpb.SFStatsRequest) (*controlpb.SFStatsResponse, error) {
	find, cancel := context.WithTimeout(ctx, readLeaderWait)
	c, _, err := s.leaderOr(find)
	cancel()
	switch {
	case err != nil:
		return nil, err
	case c == nil:
		return s.localSFStats(ctx)
	default:
		return c.SFStats(forwardContext(ctx), req)
	}
}

func (s *Server) localSFStats(ctx context.Context) (*controlpb.SFStatsResponse, error) {
	t, err := s.SF.Stats(ctx)
	if err != nil {
		return nil, err
	}
	return &controlpb.SFStatsResponse{Targets: t, Node: s.NodeID, Live: s.Roles.Current().Role == role.Active}, nil
}

// SFList lists pending or parked messages.
func (s *Server) SFList(ctx context.Context, req *controlpb.SFListRequest) (*controlpb.SFListResponse, error) {
	limit := int(req.Limit)
	if limit <= 0 || limit > 10000 {
		limit = 100
	}
	m, err := s.SF.List(ctx, req.Target, req.Parked, limit)
	if err != nil {
		return nil, err
	}
	return &controlpb.SFListResponse{Messages: m}, nil
}

// SFRetry moves parked messages back to pending.
func (s *Server) SFRetry(ctx context.Context, req *controlpb.SFSelectRequest) (*controlpb.SFSelectResponse, error) {
	n, err := s.SF.Retry(ctx, req.Ids, req.AllOfTarget)
	if err != nil {
		return nil, err
	}
	s.audit(ctx, "sf-retry", selectionDetail(req, n))
	return &controlpb.SFSelectResponse{Affected: int32(n)}, nil
}

// SFDiscard drops parked messages.
func (s *Server) SFDiscard(ctx context.Context, req *controlpb.SFSelectRequest) (*controlpb.SFSelectResponse, error) {
	n, err := s.SF.Discard(ctx, req.Ids, req.AllOfTarget)
	if err != nil {
		return nil, err
	}
	s.audit(ctx, "sf-discard", selectionDetail(req, n))
	return &controlpb.SFSelectResponse{Affected: int32(n)}, nil
}

// selectionDetail says in the audit log what a retry or discard chose.
func selectionDetail(req *controlpb.SFSelectRequest, affected int) string {
	if req.AllOfTarget != "" {
		return fmt.Sprintf("all parked messages of %s (%d)", req.AllOfTarget, affected)
	}
	return fmt.Sprintf("%d of %d ids asked for", affected, len(req.Ids))
}
