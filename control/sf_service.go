package control

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/storeforward"
	"github.com/scadad/scadad/storeforward/mqtttarget"
	"github.com/scadad/scadad/storeforward/pgtarget"
	"github.com/scadad/scadad/storeforward/sparkplug"
)

// SFService is the store-and-forward side of the control API
// (StoreForward): it maps the buffer's enqueue, its counts and the
// operator's moves to controlpb messages and gRPC codes.
type SFService struct {
	Enqueuer  *storeforward.Enqueuer
	Deliverer *storeforward.Deliverer
	Operator  *storeforward.Operator
}

// Enqueue stores one message through the group committer (a lone
// message on an idle committer is proposed at once by this call).
func (s *SFService) Enqueue(ctx context.Context, target string, payload []byte, id string) (string, bool, error) {
	res, err := s.Enqueuer.Enqueue(ctx, target, payload, id, nil)
	if err != nil {
		return res.ID, false, sfStatus("enqueue", err)
	}
	return res.ID, res.Duplicate, nil
}

// Submit hands one message to the group committer; wait answers as
// Enqueue does.
func (s *SFService) Submit(ctx context.Context, target string, payload []byte, id string) func(context.Context) (string, bool, error) {
	p, err := s.Enqueuer.Submit(ctx, target, payload, id, nil)
	return func(ctx context.Context) (string, bool, error) {
		if err != nil {
			return p.ID(), false, sfStatus("enqueue", err)
		}
		res, err := p.Wait(ctx)
		if err != nil {
			return res.ID, false, sfStatus("enqueue", err)
		}
		return res.ID, res.Duplicate, nil
	}
}

// sfStatus maps store-and-forward errors to gRPC codes.
func sfStatus(what string, err error) error {
	var unknown *storeforward.UnknownTargetError
	var tooLarge *storeforward.PayloadTooLargeError
	var full *storeforward.TargetFullError
	switch {
	case errors.As(err, &unknown):
		return status.Errorf(codes.NotFound, "sf %s: %v", what, err)
	case errors.As(err, &full):
		return status.Errorf(codes.ResourceExhausted, "sf %s: %v", what, err)
	case errors.As(err, &tooLarge), errors.Is(err, storeforward.ErrInvalid):
		return status.Errorf(codes.InvalidArgument, "sf %s: %v", what, err)
	case status.Code(err) != codes.Unknown:
		return err
	}
	return status.Errorf(codes.Unavailable, "sf %s: %v", what, err)
}

// Stats joins the replicated counts with this node's live delivery figures.
func (s *SFService) Stats(ctx context.Context) ([]*controlpb.SFTargetStats, error) {
	stats, err := s.Operator.Stats()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "sf stats: %v", err)
	}
	delivery := s.Deliverer.Status()
	var out []*controlpb.SFTargetStats
	for _, st := range stats {
		ts := &controlpb.SFTargetStats{Target: st.Target, Pending: st.Pending, Parked: st.Parked, DeliveredPerSec: st.DeliveredPerSec, LastError: st.LastError, DeliveredTotal: st.Delivered}
		if !st.OldestEnqueue.IsZero() {
			ts.OldestUnixNano = st.OldestEnqueue.UnixNano()
		}
		t, configured := s.Deliverer.Target(st.Target)
		if configured {
			ts.MaxPending = uint64(t.MaxPending)
			ts.Kind, ts.Endpoint = targetEndpoint(t)
			ts.BatchMaxMessages, ts.MaxInFlight = int32(t.BatchMaxMessages), int32(t.MaxInFlight)
		}
		ts.State = targetState(configured, slices.Contains(delivery.Workers, st.Target), delivery.Active, st)
		out = append(out, ts)
	}
	return out, nil
}

// targetEndpoint says where a target delivers, without credentials.
func targetEndpoint(t storeforward.Target) (kind, endpoint string) {
	switch set := t.Settings.(type) {
	case mqtttarget.Settings:
		u, err := url.Parse(set.Broker)
		if err != nil {
			return mqtttarget.Name, ""
		}
		return mqtttarget.Name, u.Redacted() + " topic " + set.Topic
	case sparkplug.Settings:
		u, err := url.Parse(set.Connection.Broker)
		if err != nil {
			return sparkplug.Name, ""
		}
		return sparkplug.Name, u.Redacted() + " edge node " + sparkplug.Namespace + "/" + set.GroupID + "/" + set.EdgeNode
	case pgtarget.Settings:
		where := "dsn"
		if u, err := url.Parse(set.DSN); err == nil && u.Host != "" {
			where = u.Host + u.Path
		} else {
			for _, kv := range strings.Fields(set.DSN) {
				if k, v, ok := strings.Cut(kv, "="); ok && (k == "host" || k == "dbname") {
					where += " " + k + "=" + v
				}
			}
		}
		return pgtarget.Name, where + " table " + set.Table
	}
	if u, err := url.Parse(t.URL); err == nil {
		return storeforward.KindHTTP, u.Redacted()
	}
	return storeforward.KindHTTP, ""
}

// targetState is what delivery does for a target on this node.
func targetState(configured, worker, active bool, st storeforward.TargetStatus) string {
	switch {
	case !configured:
		return "not configured (its messages stay in the buffer)"
	case !active:
		return "standby (the Active node delivers)"
	case !worker:
		return "starting"
	case st.LastError != "":
		return "failing"
	case st.Pending > 0:
		return "delivering"
	}
	return "idle"
}

// List reads pending or parked messages from this node's replica.
func (s *SFService) List(ctx context.Context, target string, parked bool, limit int) ([]*controlpb.SFMessage, error) {
	msgs, err := s.Operator.List(target, parked, limit)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "sf list: %v", err)
	}
	var out []*controlpb.SFMessage
	for _, m := range msgs {
		sm := &controlpb.SFMessage{Id: m.ID, Target: m.Target, Seq: m.Seq, EnqueuedUnixNano: m.EnqueuedAt.UnixNano(), Size: int32(len(m.Payload)),
			ParkReason: m.ParkReason, Attempts: int32(m.Attempts), LastError: m.LastError}
		if !m.LastAttemptAt.IsZero() {
			sm.LastAttemptUnixNano = m.LastAttemptAt.UnixNano()
		}
		out = append(out, sm)
	}
	return out, nil
}

// Retry moves parked messages back to pending.
func (s *SFService) Retry(ctx context.Context, ids []string, allOfTarget string) (int, error) {
	res, err := s.Operator.Retry(ctx, storeforward.Selection{IDs: ids, AllOfTarget: allOfTarget})
	return moved("retry", res, err)
}

// Discard drops parked messages.
func (s *SFService) Discard(ctx context.Context, ids []string, allOfTarget string) (int, error) {
	res, err := s.Operator.Discard(ctx, storeforward.Selection{IDs: ids, AllOfTarget: allOfTarget}, "operator discard")
	return moved("discard", res, err)
}

func moved(what string, res storeforward.MoveResult, err error) (int, error) {
	switch {
	case errors.Is(err, storeforward.ErrUnavailable):
		return res.Moved, status.Errorf(codes.Unavailable, "sf %s: %v", what, err)
	case err != nil:
		return res.Moved, status.Errorf(codes.InvalidArgument, "sf %s: %v", what, err)
	case len(res.NotParked) > 0:
		return res.Moved, status.Errorf(codes.NotFound, "sf %s: not parked: %v (%d moved)", what, res.NotParked, res.Moved)
	}
	return res.Moved, nil
}
