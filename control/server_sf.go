package control

import (
	"context"
	"errors"
	"io"

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
