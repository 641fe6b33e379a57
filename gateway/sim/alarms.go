package sim

import (
	"bufio"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/gateway"
	pb "github.com/scadad/scadad/gateway/gatewaypb"
)

// AlarmSpec raises (or re-raises with new details) an alarm.
type AlarmSpec struct {
	ID        string
	Source    string
	Condition string
	Severity  uint32
	Message   string
	// State is the sub-state name; empty means "Active".
	State string
}

// AckRecord is one acknowledgement the gateway received from a client.
type AckRecord struct {
	AlarmID  string `json:"alarm_id"`
	Operator string `json:"operator"`
	Comment  string `json:"comment"`
	// Epoch is what the request carried ("" when it carried none).
	Epoch string `json:"epoch"`
}

// AlarmStats are the alarm counters, part of Stats.
type AlarmStats struct {
	// Subscribes counts SubscribeAlarms commands received, by source.
	Subscribes map[string]int64 `json:"subscribes"`
	// PeakInFlightPerSource is the most SubscribeAlarms commands for one
	// (session, source) outstanding at once: the Lever 1 guard keeps it 1.
	PeakInFlightPerSource int64       `json:"peak_in_flight_per_source"`
	Acks                  []AckRecord `json:"acks"`
	StaleEpochAcks        int64       `json:"stale_epoch_acks"`
	AcksWithoutEpoch      int64       `json:"acks_without_epoch"`
	Transitions           int64       `json:"transitions"`
}

// maxAckRecords bounds the acknowledgements kept for Stats.
const maxAckRecords = 100_000

// alarms live in the field system, not in the gateway process: they
// survive Restart, as a real gateway re-reads them from the Galaxy.
func (s *Sim) alarmLocked(id string) *gateway.Alarm {
	if s.alarms == nil {
		s.alarms = map[string]*gateway.Alarm{}
	}
	return s.alarms[id]
}

// RaiseAlarm makes an alarm active (a new activation: unacknowledged) and
// streams the transition to the sessions subscribed to its source.
func (s *Sim) RaiseAlarm(spec AlarmSpec) error {
	if spec.ID == "" || spec.Source == "" {
		return fmt.Errorf("raise alarm: id and source are required")
	}
	if spec.Severity < 1 || spec.Severity > 1000 {
		return fmt.Errorf("raise alarm %q: severity %d outside 1..1000", spec.ID, spec.Severity)
	}
	if spec.State == "" {
		spec.State = "Active"
	}
	if spec.Condition == "" {
		spec.Condition = spec.ID
	}
	s.mu.Lock()
	a := s.alarmLocked(spec.ID)
	if a == nil {
		a = &gateway.Alarm{ID: spec.ID}
		s.alarms[spec.ID] = a
	}
	if a.Source != "" && a.Source != spec.Source {
		s.mu.Unlock()
		return fmt.Errorf("raise alarm %q: it belongs to source %q, not %q", spec.ID, a.Source, spec.Source)
	}
	wasActive := a.Active
	a.Source, a.Condition, a.Severity, a.Message, a.State = spec.Source, spec.Condition, spec.Severity, spec.Message, spec.State
	a.Active = true
	if !wasActive {
		a.Acked, a.AckOperator, a.AckComment = false, "", ""
	}
	s.transitionLocked(a)
	s.mu.Unlock()
	return nil
}

// ClearAlarm returns an alarm to normal. An acknowledged alarm that clears
// is forgotten after the transition is sent; an unacknowledged one stays
// (it still needs its acknowledgement).
func (s *Sim) ClearAlarm(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.alarmLocked(id)
	if a == nil {
		return fmt.Errorf("clear alarm %q: no such alarm", id)
	}
	if !a.Active {
		return nil
	}
	a.Active, a.State = false, "Normal"
	s.transitionLocked(a)
	return nil
}

// AckAlarm acknowledges an alarm on the field side (an HMI next to the
// gateway), without a scadad client.
func (s *Sim) AckAlarm(id, operator, comment string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.ackLocked(id, operator, comment)
	return err
}

func (s *Sim) ackLocked(id, operator, comment string) (*gateway.Alarm, error) {
	a := s.alarmLocked(id)
	if a == nil {
		return nil, fmt.Errorf("acknowledge alarm %q: no such alarm", id)
	}
	if a.Acked {
		return a, nil
	}
	a.Acked, a.AckOperator, a.AckComment = true, operator, comment
	s.transitionLocked(a)
	return a, nil
}

// Alarms returns every alarm the gateway holds, by id.
func (s *Sim) Alarms() []gateway.Alarm {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]gateway.Alarm, 0, len(s.alarms))
	for _, a := range s.alarms {
		out = append(out, *a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// transitionLocked stamps a transition and streams it to every session
// subscribed to the alarm's source.
func (s *Sim) transitionLocked(a *gateway.Alarm) {
	a.Seq++
	a.Time = time.Now()
	s.stats.Alarms.Transitions++
	ev := &pb.AlarmEvent{Kind: &pb.AlarmEvent_Transition{Transition: gateway.AlarmToProto(*a)}}
	for _, sess := range s.sessions {
		sess.mu.Lock()
		subscribed := sess.alarmSources[a.Source]
		sess.mu.Unlock()
		if !subscribed {
			continue
		}
		select {
		case sess.alarmEvents <- ev:
		default: // a client that does not read loses transitions (it refreshes)
		}
	}
}

// StreamActiveAlarms implements the gateway service.
func (s *Sim) StreamActiveAlarms(req *pb.StreamActiveAlarmsRequest, stream pb.MxAccessGateway_StreamActiveAlarmsServer) error {
	s.mu.Lock()
	sess, ok := s.sessions[req.GetSessionId()]
	has := s.hasCapLocked(gateway.CapStreamActiveAlarms)
	s.mu.Unlock()
	if !has {
		return status.Error(codes.Unimplemented, "StreamActiveAlarms is not offered")
	}
	if !ok {
		return status.Errorf(codes.NotFound, "session %q not found", req.GetSessionId())
	}
	for {
		select {
		case ev := <-sess.alarmEvents:
			if err := stream.Send(ev); err != nil {
				return err
			}
		case <-sess.closed:
			return status.Error(codes.Unavailable, "session closed")
		case <-s.stop:
			return status.Error(codes.Unavailable, "gateway stopping")
		case <-stream.Context().Done():
			return nil
		}
	}
}

// AcknowledgeAlarm implements the gateway service: the acknowledgement
// runs on the apartment (it can be wedged, and its reply dropped, like any
// command) and is fenced by the epoch as writes are.
func (s *Sim) AcknowledgeAlarm(ctx context.Context, req *pb.AcknowledgeAlarmRequest) (*pb.AcknowledgeAlarmReply, error) {
	s.mu.Lock()
	if !s.hasCapLocked(gateway.CapUnaryAcknowledgeAlarm) {
		s.mu.Unlock()
		return nil, status.Error(codes.Unimplemented, "AcknowledgeAlarm is not offered")
	}
	epoch := req.GetEpoch()
	if epoch == "" {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(gateway.EpochMetadataKey); len(v) > 0 {
			epoch = v[0]
		}
	}
	if err := s.fenceAckLocked(epoch); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.mu.Unlock()
	id, operator, comment := req.GetAlarmId(), req.GetOperator(), req.GetComment()
	s.mu.Lock()
	sess, ok := s.sessions[req.GetSessionId()]
	if !ok {
		s.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "session %q not found", req.GetSessionId())
	}
	s.stats.Commands[gateway.KindAcknowledgeAlarm]++
	cost := s.costLocked(gateway.KindAcknowledgeAlarm, &pb.MxCommand{})
	s.mu.Unlock()
	_, err := s.runJob(ctx, sess, gateway.KindAcknowledgeAlarm, cost, "", func() (*pb.MxCommandReply, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, err := s.ackLocked(id, operator, comment)
		if err != nil {
			return nil, status.Error(codes.NotFound, err.Error())
		}
		if len(s.stats.Alarms.Acks) < maxAckRecords {
			s.stats.Alarms.Acks = append(s.stats.Alarms.Acks, AckRecord{AlarmID: id, Operator: operator, Comment: comment, Epoch: epoch})
		}
		return &pb.MxCommandReply{}, nil
	})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	a := *s.alarms[id]
	s.mu.Unlock()
	return &pb.AcknowledgeAlarmReply{Alarm: gateway.AlarmToProto(a)}, nil
}

func (s *Sim) fenceAckLocked(epoch string) error {
	if epoch == "" {
		s.stats.Alarms.AcksWithoutEpoch++
		return nil
	}
	e, err := gateway.ParseEpoch(epoch)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "%v", err)
	}
	if e.Less(s.highestEpoch) {
		s.stats.Alarms.StaleEpochAcks++
		return status.Errorf(codes.FailedPrecondition, "stale epoch %s, newest seen %s", e, s.highestEpoch)
	}
	s.highestEpoch = e
	return nil
}

// subscribeAlarmsLocked prepares a SubscribeAlarms command.
func (s *Sim) subscribeAlarmsLocked(sess *session, source string) func() (*pb.MxCommandReply, error) {
	s.stats.Alarms.Subscribes[source]++
	return func() (*pb.MxCommandReply, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		sess.mu.Lock()
		sess.alarmSources[source] = true
		sess.mu.Unlock()
		var out []*pb.AlarmState
		ids := make([]string, 0, len(s.alarms))
		for id, a := range s.alarms {
			if a.Source == source {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		for _, id := range ids {
			out = append(out, gateway.AlarmToProto(*s.alarms[id]))
		}
		return &pb.MxCommandReply{Result: &pb.MxCommandReply_SubscribeAlarms{SubscribeAlarms: &pb.SubscribeAlarmsReply{Alarms: out}}}, nil
	}
}

func (s *Sim) trackAlarmInFlightLocked(sess *session, source string, delta int64) {
	sess.alarmInFlight[source] += delta
	if n := sess.alarmInFlight[source]; n > s.stats.Alarms.PeakInFlightPerSource {
		s.stats.Alarms.PeakInFlightPerSource = n
	}
}

// --- scripted schedule ---

// AlarmStep is one line of an alarm script: at At after the start, do Op
// ("raise", "clear" or "ack") on an alarm.
type AlarmStep struct {
	At       time.Duration
	Op       string
	Spec     AlarmSpec
	Operator string
	Comment  string
}

// ParseAlarmScript reads an alarm schedule, one step a line ('#' starts a
// comment):
//
//	<offset> raise <id> <source> <severity> <condition> [message...]
//	<offset> clear <id>
//	<offset> ack   <id> <operator> [comment...]
func ParseAlarmScript(text string) ([]AlarmStep, error) {
	var steps []AlarmStep
	sc := bufio.NewScanner(strings.NewReader(text))
	line := 0
	for sc.Scan() {
		line++
		l := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(l, '#'); i >= 0 {
			l = strings.TrimSpace(l[:i])
		}
		if l == "" {
			continue
		}
		f := strings.Fields(l)
		if len(f) < 3 {
			return nil, fmt.Errorf("alarm script line %d: want <offset> <op> <id> [args]", line)
		}
		at, err := time.ParseDuration(f[0])
		if err != nil || at < 0 {
			return nil, fmt.Errorf("alarm script line %d: offset %q is not a duration >= 0", line, f[0])
		}
		st := AlarmStep{At: at, Op: f[1], Spec: AlarmSpec{ID: f[2]}}
		switch f[1] {
		case "raise":
			if len(f) < 6 {
				return nil, fmt.Errorf("alarm script line %d: raise wants <id> <source> <severity> <condition> [message]", line)
			}
			sev, err := strconv.ParseUint(f[4], 10, 32)
			if err != nil || sev < 1 || sev > 1000 {
				return nil, fmt.Errorf("alarm script line %d: severity %q is not 1..1000", line, f[4])
			}
			st.Spec.Source, st.Spec.Severity, st.Spec.Condition = f[3], uint32(sev), f[5]
			st.Spec.Message = strings.Join(f[6:], " ")
		case "clear":
		case "ack":
			if len(f) < 4 {
				return nil, fmt.Errorf("alarm script line %d: ack wants <id> <operator> [comment]", line)
			}
			st.Operator, st.Comment = f[3], strings.Join(f[4:], " ")
		default:
			return nil, fmt.Errorf("alarm script line %d: unknown op %q (raise, clear, ack)", line, f[1])
		}
		steps = append(steps, st)
	}
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].At < steps[j].At })
	return steps, sc.Err()
}

// RunAlarmScript plays steps from now until done or ctx ends. A step that
// fails (ack of an unknown alarm) is logged and skipped.
func (s *Sim) RunAlarmScript(ctx context.Context, steps []AlarmStep) {
	start := time.Now()
	for _, st := range steps {
		t := time.NewTimer(time.Until(start.Add(st.At)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		var err error
		switch st.Op {
		case "raise":
			err = s.RaiseAlarm(st.Spec)
		case "clear":
			err = s.ClearAlarm(st.Spec.ID)
		case "ack":
			err = s.AckAlarm(st.Spec.ID, st.Operator, st.Comment)
		}
		if err != nil {
			s.log.Warn().Err(err).Msg("sim: alarm script step failed")
		}
	}
}
