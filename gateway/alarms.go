package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/metadata"

	pb "github.com/scadad/scadad/gateway/gatewaypb"
	"github.com/scadad/scadad/role"
)

// Alarm capability strings (the seeds list both among the gateway's nine).
const (
	// CapStreamActiveAlarms means SubscribeAlarms and the active-alarm
	// stream exist.
	CapStreamActiveAlarms = "server-stream-active-alarms"
	// CapUnaryAcknowledgeAlarm means AcknowledgeAlarm exists.
	CapUnaryAcknowledgeAlarm = "unary-acknowledge-alarm"
)

// Alarm command kinds, as counted in metrics and by the simulator.
const (
	KindSubscribeAlarms  = "subscribe_alarms"
	KindAcknowledgeAlarm = "acknowledge_alarm"
)

// ErrNoCapability is returned for an alarm call on a session whose gateway
// does not advertise the capability it needs.
var ErrNoCapability = errors.New("gateway does not offer it")

// Alarm is one alarm's condition after its latest transition on the
// gateway.
type Alarm struct {
	ID        string
	Source    string
	Condition string
	// Severity is 1..1000.
	Severity uint32
	Message  string
	Active   bool
	Acked    bool
	// State is the field system's name of the sub-state ("HiHi", "Normal").
	State string
	Time  time.Time
	// Seq counts the alarm's transitions on the gateway.
	Seq         uint64
	AckOperator string
	AckComment  string
}

// AlarmHandler is implemented by a Handler that also wants alarm
// transitions of the sources it subscribed.
type AlarmHandler interface {
	AlarmChange(Alarm)
}

// AlarmFromProto converts a wire alarm state.
func AlarmFromProto(a *pb.AlarmState) Alarm {
	out := Alarm{
		ID: a.GetAlarmId(), Source: a.GetSource(), Condition: a.GetConditionName(), Severity: a.GetSeverity(),
		Message: a.GetMessage(), Active: a.GetActive(), Acked: a.GetAcked(), State: a.GetConditionState(),
		Seq: a.GetTransitionSeq(), AckOperator: a.GetAckOperator(), AckComment: a.GetAckComment(),
	}
	if a.GetTransitionTime() != nil {
		out.Time = a.GetTransitionTime().AsTime()
	}
	return out
}

// AlarmToProto converts an alarm for the wire (the simulator's side).
func AlarmToProto(a Alarm) *pb.AlarmState {
	return &pb.AlarmState{
		AlarmId: a.ID, Source: a.Source, ConditionName: a.Condition, Severity: a.Severity, Message: a.Message,
		Active: a.Active, Acked: a.Acked, ConditionState: a.State, TransitionTime: TimestampToProto(a.Time),
		TransitionSeq: a.Seq, AckOperator: a.AckOperator, AckComment: a.AckComment,
	}
}

// SubscribeAlarms subscribes the session to one alarm source and returns
// the source's current conditions (so it is the condition refresh too).
// It fails with ErrNoCapability on a gateway without the active-alarm
// stream.
func (c *Client) SubscribeAlarms(ctx context.Context, source string) ([]Alarm, error) {
	s, err := c.session()
	if err != nil {
		return nil, err
	}
	if !s.caps[CapStreamActiveAlarms] {
		return nil, fmt.Errorf("subscribe alarms of %q: %s: %w", source, CapStreamActiveAlarms, ErrNoCapability)
	}
	rep, err := c.invokeOn(ctx, s, &pb.MxCommand{Kind: &pb.MxCommand_SubscribeAlarms{SubscribeAlarms: &pb.SubscribeAlarmsCommand{
		ServerHandle: s.serverHandle, Source: source,
	}}})
	if err != nil {
		return nil, fmt.Errorf("subscribe alarms of %q: %w", source, err)
	}
	if c.current() != s {
		return nil, fmt.Errorf("subscribe alarms of %q: session %s was replaced meanwhile", source, s.id)
	}
	states := rep.GetSubscribeAlarms().GetAlarms()
	out := make([]Alarm, 0, len(states))
	for _, a := range states {
		out = append(out, AlarmFromProto(a))
	}
	return out, nil
}

// AcknowledgeAlarm acknowledges alarm id on the field system as operator,
// stamped with the acknowledger's fencing epoch (in the request and in the
// metadata). It returns the alarm's state after the acknowledgement.
func (c *Client) AcknowledgeAlarm(ctx context.Context, id, operator, comment string, epoch role.Epoch) (Alarm, error) {
	s, err := c.session()
	if err != nil {
		return Alarm{}, fmt.Errorf("acknowledge alarm %q: %w", id, err)
	}
	if !s.caps[CapUnaryAcknowledgeAlarm] {
		return Alarm{}, fmt.Errorf("acknowledge alarm %q: %s: %w", id, CapUnaryAcknowledgeAlarm, ErrNoCapability)
	}
	if c.cfg.Metrics != nil {
		c.cfg.Metrics.commands.WithLabelValues(c.cfg.Name, KindAcknowledgeAlarm).Inc()
	}
	ep := FormatEpoch(epoch)
	ctx = metadata.AppendToOutgoingContext(ctx, EpochMetadataKey, ep)
	rep, err := c.api.AcknowledgeAlarm(ctx, &pb.AcknowledgeAlarmRequest{
		SessionId: s.id, AlarmId: id, Comment: comment, Operator: operator, Epoch: ep,
	})
	if err != nil {
		return Alarm{}, fmt.Errorf("acknowledge alarm %q at epoch %s: %w", id, ep, err)
	}
	return AlarmFromProto(rep.GetAlarm()), nil
}

// streamAlarms keeps the session's active-alarm stream open, like
// streamEvents, where the gateway offers it and the handler wants alarms.
func (c *Client) streamAlarms(ctx context.Context, s *liveSession) {
	h, ok := c.cfg.Handler.(AlarmHandler)
	if !ok || !s.caps[CapStreamActiveAlarms] {
		return
	}
	c.keepStream(ctx, s, "alarm", func() error { return c.readAlarms(ctx, s, h) })
}

func (c *Client) readAlarms(ctx context.Context, s *liveSession, h AlarmHandler) error {
	stream, err := c.api.StreamActiveAlarms(ctx, &pb.StreamActiveAlarmsRequest{SessionId: s.id})
	if err != nil {
		return fmt.Errorf("open alarm stream: %w", err)
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("receive alarm: %w", err)
		}
		if a := ev.GetTransition(); a != nil {
			c.handlerMu.Lock()
			h.AlarmChange(AlarmFromProto(a))
			c.handlerMu.Unlock()
		}
	}
}
