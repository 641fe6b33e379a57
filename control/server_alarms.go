package control

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/alarms"
	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/fsm/fsmpb"
)

// Alarms is what the alarm RPCs need; *alarms.Service is one.
type Alarms interface {
	List() ([]*fsmpb.AlarmRecord, error)
	Acknowledge(ctx context.Context, id, operator, comment string) error
	Confirm(ctx context.Context, id, operator, comment string) error
	Shelve(ctx context.Context, id, operator string, shelve bool, until time.Time, comment string) error
}

// AlarmList answers the replicated alarm state of this node.
func (s *Server) AlarmList(ctx context.Context, req *controlpb.AlarmListRequest) (*controlpb.AlarmListResponse, error) {
	if s.Alarms == nil {
		return nil, status.Error(codes.Unimplemented, "alarms are not served by this node")
	}
	recs, err := s.Alarms.List()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read alarms: %v", err)
	}
	out := &controlpb.AlarmListResponse{}
	for _, r := range recs {
		if req.AttentionOnly && !r.Active && r.Acked {
			continue
		}
		out.Alarms = append(out.Alarms, &controlpb.AlarmInfo{
			Id: r.AlarmId, Source: r.Source, Condition: r.ConditionName, Severity: r.Severity, Message: r.Message,
			Active: r.Active, Acked: r.Acked, Confirmed: r.Confirmed, AckOperator: r.AckOperator, AckUnixNano: r.AckUnixNano,
			AckComment: r.AckComment, Shelved: r.Shelved, ShelvedBy: r.ShelvedBy, ShelvedUntilUnixNano: r.ShelvedUntilUnixNano,
			ActiveSinceUnixNano: r.ActiveSinceUnixNano, Seq: r.Seq, Kind: r.Kind, State: r.ConditionState, Connection: r.Connection,
		})
	}
	return out, nil
}

// operator names the caller for an alarm operation.
func operator(ctx context.Context) string {
	if c, ok := CallerFrom(ctx); ok && c.Name != "" {
		return c.Name
	}
	return "unknown"
}

// AlarmAck acknowledges (or confirms) an alarm as the caller.
func (s *Server) AlarmAck(ctx context.Context, req *controlpb.AlarmAckRequest) (*controlpb.AlarmAckResponse, error) {
	if s.Alarms == nil {
		return nil, status.Error(codes.Unimplemented, "alarms are not served by this node")
	}
	op := operator(ctx)
	var err error
	if req.Confirm {
		err = s.Alarms.Confirm(ctx, req.Id, op, req.Comment)
	} else {
		err = s.Alarms.Acknowledge(ctx, req.Id, op, req.Comment)
	}
	if err != nil {
		return nil, alarmStatus(err, s)
	}
	return &controlpb.AlarmAckResponse{}, nil
}

// AlarmShelve shelves or unshelves an alarm as the caller.
func (s *Server) AlarmShelve(ctx context.Context, req *controlpb.AlarmShelveRequest) (*controlpb.AlarmShelveResponse, error) {
	if s.Alarms == nil {
		return nil, status.Error(codes.Unimplemented, "alarms are not served by this node")
	}
	var until time.Time
	if req.UntilUnixNano > 0 {
		until = time.Unix(0, req.UntilUnixNano)
	}
	if err := s.Alarms.Shelve(ctx, req.Id, operator(ctx), !req.Unshelve, until, req.Comment); err != nil {
		return nil, alarmStatus(err, s)
	}
	return &controlpb.AlarmShelveResponse{}, nil
}

func alarmStatus(err error, s *Server) error {
	var na *alarms.NotActiveError
	switch {
	case errors.As(err, &na):
		msg := err.Error()
		if s.Roles != nil {
			if l := s.Roles.Current().Leader; l != "" {
				msg += "; the Active is " + l
			}
		}
		return status.Error(codes.FailedPrecondition, msg)
	case errors.Is(err, alarms.ErrUnknownAlarm):
		return status.Error(codes.NotFound, err.Error())
	}
	if _, ok := status.FromError(err); ok && status.Code(err) != codes.Unknown {
		return err
	}
	return status.Error(codes.Aborted, err.Error())
}
