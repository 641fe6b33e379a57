package control

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/heal"
)

// HealServer serves the Heal service: the winner's side of healing a
// dual-active split (package heal does the work). Only the configured
// peer's node certificate may call the merge RPCs; HealInfo answers any
// configured node.
type HealServer struct {
	controlpb.UnimplementedHealServer

	Configured []Member
	// Facts are this node's own facts for the winner rule.
	Facts    func(ctx context.Context) (heal.Facts, error)
	Absorber *heal.Absorber
}

// caller returns the calling node's id, refusing anything but a
// configured node certificate.
func (h *HealServer) caller(ctx context.Context, what string) (string, error) {
	c := actor(ctx)
	if m, ok := memberNamed(h.Configured, c); ok && !m.Witness {
		return c, nil
	}
	return "", status.Errorf(codes.PermissionDenied, "%s: %q is not a cluster node; heal RPCs are between the pair's nodes", what, c)
}

// healStatus maps heal errors to codes: a refusal is final for this merge
// (the loser abandons or re-decides), anything else is worth a retry.
func healStatus(what string, err error) error {
	var cerr *fsm.CommandError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, heal.ErrNotWinner):
		return status.Errorf(codes.FailedPrecondition, "%s: %v", what, err)
	case errors.Is(err, heal.ErrUnknownMerge):
		return status.Errorf(codes.NotFound, "%s: %v", what, err)
	case errors.As(err, &cerr):
		return status.Errorf(codes.InvalidArgument, "%s: %v", what, err)
	case status.Code(err) != codes.Unknown:
		return err
	}
	return status.Errorf(codes.Unavailable, "%s: %v", what, err)
}

// HealInfo returns this node's facts.
func (h *HealServer) HealInfo(ctx context.Context, _ *controlpb.HealInfoRequest) (*controlpb.HealFacts, error) {
	if _, err := h.caller(ctx, "heal info"); err != nil {
		return nil, err
	}
	f, err := h.Facts(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "heal info: %v", err)
	}
	return heal.FactsToProto(f), nil
}

// HealBegin accepts (or resumes) a merge from the calling loser.
func (h *HealServer) HealBegin(ctx context.Context, req *controlpb.HealBeginRequest) (*controlpb.HealBeginResponse, error) {
	c, err := h.caller(ctx, "heal begin")
	if err != nil {
		return nil, err
	}
	if req.Loser == nil || req.Loser.NodeId != c {
		return nil, status.Errorf(codes.PermissionDenied, "heal begin: %q may only begin its own merge", c)
	}
	self, resumed, err := h.Absorber.Begin(ctx, req.MergeId, heal.FactsFromProto(req.Loser))
	if err != nil {
		return nil, healStatus("heal begin", err)
	}
	return &controlpb.HealBeginResponse{Winner: heal.FactsToProto(self), Resumed: resumed}, nil
}

// HealMissing filters ids down to those this node lacks.
func (h *HealServer) HealMissing(ctx context.Context, req *controlpb.HealMissingRequest) (*controlpb.HealMissingResponse, error) {
	if _, err := h.caller(ctx, "heal missing"); err != nil {
		return nil, err
	}
	missing, err := h.Absorber.Missing(ctx, req.MergeId, req.Ids)
	if err != nil {
		return nil, healStatus("heal missing", err)
	}
	return &controlpb.HealMissingResponse{Missing: missing}, nil
}

// HealMessages absorbs the loser's messages.
func (h *HealServer) HealMessages(ctx context.Context, req *controlpb.HealMessagesRequest) (*controlpb.HealCounts, error) {
	if _, err := h.caller(ctx, "heal messages"); err != nil {
		return nil, err
	}
	msgs := make([]heal.Message, 0, len(req.Messages))
	for _, m := range req.Messages {
		hm := heal.Message{ID: m.Id, Target: m.Target, Payload: m.Payload, Parked: m.Parked}
		for _, kv := range m.Headers {
			hm.Headers = append(hm.Headers, fsm.Header{Key: kv.Key, Value: kv.Value})
		}
		msgs = append(msgs, hm)
	}
	c, err := h.Absorber.Messages(ctx, req.MergeId, msgs)
	if err != nil {
		return nil, healStatus("heal messages", err)
	}
	return &controlpb.HealCounts{Added: int64(c.Added), Duplicates: int64(c.Duplicates)}, nil
}

// HealFinished absorbs the loser's delivered and discarded ids.
func (h *HealServer) HealFinished(ctx context.Context, req *controlpb.HealFinishedRequest) (*controlpb.HealCounts, error) {
	if _, err := h.caller(ctx, "heal finished"); err != nil {
		return nil, err
	}
	c, err := h.Absorber.Finished(ctx, req.MergeId, req.Ids)
	if err != nil {
		return nil, healStatus("heal finished", err)
	}
	return &controlpb.HealCounts{Added: int64(c.Added), Duplicates: int64(c.Duplicates)}, nil
}

// HealRecords records the loser's split-era deploys and audit entries.
func (h *HealServer) HealRecords(ctx context.Context, req *controlpb.HealRecordsRequest) (*controlpb.HealCounts, error) {
	c, err := h.caller(ctx, "heal records")
	if err != nil {
		return nil, err
	}
	recs := make([]heal.Record, 0, len(req.Records))
	for _, r := range req.Records {
		recs = append(recs, heal.Record{Kind: r.Kind, Key: r.Key, At: time.Unix(0, r.AtUnixNano), Actor: r.Actor, Detail: r.Detail})
	}
	counts, err := h.Absorber.Records(ctx, req.MergeId, c, recs)
	if err != nil {
		return nil, healStatus("heal records", err)
	}
	return &controlpb.HealCounts{Added: int64(counts.Added), Duplicates: int64(counts.Duplicates)}, nil
}

// HealFinish closes the merge.
func (h *HealServer) HealFinish(ctx context.Context, req *controlpb.HealFinishRequest) (*controlpb.HealFinishResponse, error) {
	c, err := h.caller(ctx, "heal finish")
	if err != nil {
		return nil, err
	}
	epoch, err := h.Absorber.Finish(ctx, req.MergeId, c, heal.FinishSummary{
		LoserEpoch: req.LoserEpoch, Messages: req.Messages, Finished: req.Finished, Records: req.Records,
	})
	if err != nil {
		return nil, healStatus("heal finish", err)
	}
	return &controlpb.HealFinishResponse{ClusterEpoch: epoch}, nil
}
