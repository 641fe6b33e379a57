package control

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
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

// SFStats reports per-target buffer figures.
func (s *Server) SFStats(ctx context.Context, _ *controlpb.SFStatsRequest) (*controlpb.SFStatsResponse, error) {
	t, err := s.SF.Stats(ctx)
	if err != nil {
		return nil, err
	}
	return &controlpb.SFStatsResponse{Targets: t}, nil
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
	return &controlpb.SFSelectResponse{Affected: int32(n)}, nil
}

// SFDiscard drops parked messages.
func (s *Server) SFDiscard(ctx context.Context, req *controlpb.SFSelectRequest) (*controlpb.SFSelectResponse, error) {
	n, err := s.SF.Discard(ctx, req.Ids, req.AllOfTarget)
	if err != nil {
		return nil, err
	}
	return &controlpb.SFSelectResponse{Affected: int32(n)}, nil
}
