package sim

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/scadad/scadad/field"
	"github.com/scadad/scadad/gateway"
	pb "github.com/scadad/scadad/gateway/gatewaypb"
	"github.com/scadad/scadad/role"
)

// OldCapabilities returns what the gateway advertised at the time of the
// incident (a fresh slice each call).
func OldCapabilities() []string {
	return []string{
		"unary-open-session", "unary-close-session", "unary-invoke",
		"server-stream-events", gateway.CapBulkSubscribeCommands,
		"bulk-read-commands", "bulk-write-commands",
		"unary-acknowledge-alarm", "server-stream-active-alarms",
	}
}

// NewCapabilities returns OldCapabilities plus the bulk supervisory
// subscribe (seed Lever 2).
func NewCapabilities() []string {
	return append(OldCapabilities(), gateway.CapBulkSubscribeSupervisory)
}

// ProtocolVersion is what the simulator reports as gateway_protocol_version.
const ProtocolVersion = 3

// Config describes the simulated gateway. Zero values take the defaults noted.
type Config struct {
	Name string
	// Capabilities advertised at OpenSession; nil means NewCapabilities.
	Capabilities []string
	// DefaultCommandTimeout applies when a session asks for none (30 s).
	DefaultCommandTimeout time.Duration
	// MaxCommandTimeout clamps a requested session timeout; 0 = no clamp.
	MaxCommandTimeout time.Duration
	// CommandCost is the apartment time every command takes.
	CommandCost time.Duration
	// CostByKind overrides CommandCost for a command kind.
	CostByKind map[string]time.Duration
	// PerTagCost is added per tag or item handle in a bulk command.
	PerTagCost time.Duration
	// ChangeInterval is how often every advised item gets a new value; 0 = never.
	ChangeInterval time.Duration
	// SkipAbandoned makes the apartment skip commands whose caller already
	// got DEADLINE_EXCEEDED or went away. The real STA does not (false).
	SkipAbandoned bool
	// BadTagPrefix makes AddItem fail for tags with this prefix ("" = none).
	BadTagPrefix string
	// Kinds is the type of value sent for each tag (KindsOf reads them
	// from a site config); a tag not listed gets Doubles.
	Kinds  map[string]Kind
	Logger zerolog.Logger
}

// Stats is a snapshot of the simulator's counters.
type Stats struct {
	// Commands counts invokes received, by kind.
	Commands map[string]int64 `json:"commands"`
	// Executed counts commands the apartment actually ran, by kind.
	Executed         map[string]int64 `json:"executed"`
	DeadlineExceeded int64            `json:"deadline_exceeded"`
	// PeakInFlight is the largest number of concurrently outstanding invokes
	// on any one session; PeakSubscribeInFlight counts only subscribe-kind
	// commands (AddItemBulk, Advise*, SubscribeBulk).
	PeakInFlight          int64 `json:"peak_in_flight"`
	PeakSubscribeInFlight int64 `json:"peak_subscribe_in_flight"`
	// InFlight is outstanding invokes right now, all sessions.
	InFlight int64 `json:"in_flight"`
	// PlainAdviseOnSupervisory counts items advised plain on a supervisory
	// session: each one is a write that would silently break.
	PlainAdviseOnSupervisory int64 `json:"plain_advise_on_supervisory"`
	RepliesDropped           int64 `json:"replies_dropped"`
	SessionsOpened           int64 `json:"sessions_opened"`
	Sessions                 int   `json:"sessions"`
	AdvisedItems             int   `json:"advised_items"`
	QueueLength              int   `json:"queue_length"`
	EventsSent               int64 `json:"events_sent"`
	StaleEpochWrites         int64 `json:"stale_epoch_writes"`
	WritesWithoutEpoch       int64 `json:"writes_without_epoch"`
	// LastCommandTimeout is the timeout requested by the newest session (0 = none).
	LastRequestedTimeout time.Duration `json:"last_requested_timeout"`
	Alarms               AlarmStats    `json:"alarms"`
}

type item struct {
	handle   int32
	tag      string
	advised  bool
	adviseSV bool
}

type session struct {
	id           string
	serverHandle int32
	timeout      time.Duration
	supervisory  bool
	closed       chan struct{}
	events       chan *pb.MxEvent

	mu          sync.Mutex
	items       map[int32]*item
	nextHandle  int32
	inFlight    int64
	subInFlight int64

	alarmSources  map[string]bool
	alarmInFlight map[string]int64
	alarmEvents   chan *pb.AlarmEvent
}

type job struct {
	kind      string
	sess      *session
	cost      time.Duration
	run       func() (*pb.MxCommandReply, error)
	done      chan result
	abandoned atomic.Bool
	gen       uint64
}

type result struct {
	reply *pb.MxCommandReply
	err   error
}

// Sim is one simulated gateway. It is safe for concurrent use.
type Sim struct {
	pb.UnimplementedMxAccessGatewayServer
	log zerolog.Logger

	mu           sync.Mutex
	cfg          Config
	sessions     map[string]*session
	nextSession  int
	gen          uint64
	queue        []*job
	wedgedUntil  time.Time
	dropUntil    time.Time
	dropKinds    map[string]bool
	values       map[string]field.Value
	step         int64 // changes made so far: the next initial value is the current step's
	highestEpoch role.Epoch
	alarms       map[string]*gateway.Alarm
	stats        Stats
	wake         chan struct{}

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	server   *grpc.Server
}

// New returns a simulator; call Start to serve it or Run for the apartment
// only (when registering it on a server of your own).
func New(cfg Config) *Sim {
	if cfg.Capabilities == nil {
		cfg.Capabilities = NewCapabilities()
	}
	if cfg.DefaultCommandTimeout <= 0 {
		cfg.DefaultCommandTimeout = 30 * time.Second
	}
	if cfg.Name == "" {
		cfg.Name = "mxgw-sim"
	}
	s := &Sim{
		log:      cfg.Logger,
		cfg:      cfg,
		sessions: make(map[string]*session),
		values:   make(map[string]field.Value),
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	s.resetStatsLocked()
	return s
}

// Start serves the gateway on addr (e.g. "127.0.0.1:0") and returns the
// bound address. Extra services (an admin service) may be registered by
// passing register.
func (s *Sim) Start(addr string, register ...func(*grpc.Server)) (string, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen %s: %w", addr, err)
	}
	srv := grpc.NewServer()
	pb.RegisterMxAccessGatewayServer(srv, s)
	for _, r := range register {
		r(srv)
	}
	s.mu.Lock()
	s.server = srv
	s.mu.Unlock()
	s.startLoops()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = srv.Serve(lis)
	}()
	return lis.Addr().String(), nil
}

// Run starts the apartment and the value generator without a server of its
// own; Stop ends them.
func (s *Sim) Run() { s.startLoops() }

func (s *Sim) startLoops() {
	s.wg.Add(2)
	go s.apartment()
	go s.changer()
}

// Stop ends the server, the apartment and every session.
func (s *Sim) Stop() {
	s.stopOnce.Do(func() {
		close(s.stop)
		s.mu.Lock()
		srv := s.server
		s.closeSessionsLocked()
		s.mu.Unlock()
		if srv != nil {
			srv.Stop()
		}
		s.wg.Wait()
	})
}

// --- control (tests and the admin interface) ---

// Wedge stops the apartment (and the events it produces) for d from now.
func (s *Sim) Wedge(d time.Duration) {
	s.mu.Lock()
	s.wedgedUntil = time.Now().Add(d)
	s.mu.Unlock()
	s.log.Warn().Dur("for", d).Msg("sim: apartment wedged")
}

// DropReplies makes the gateway run commands of the given kinds (all kinds
// when none are given) but never answer them, for d from now.
func (s *Sim) DropReplies(d time.Duration, kinds ...string) {
	s.mu.Lock()
	s.dropUntil = time.Now().Add(d)
	s.dropKinds = nil
	if len(kinds) > 0 {
		s.dropKinds = make(map[string]bool, len(kinds))
		for _, k := range kinds {
			s.dropKinds[k] = true
		}
	}
	s.mu.Unlock()
	s.log.Warn().Dur("for", d).Strs("kinds", kinds).Msg("sim: dropping replies")
}

// Restart models a gateway process restart: every session and queued
// command is gone; clients must open new sessions.
func (s *Sim) Restart() {
	s.mu.Lock()
	s.closeSessionsLocked()
	s.gen++
	for _, j := range s.queue {
		j.done <- result{err: status.Error(codes.Unavailable, "gateway restarted")}
	}
	s.queue = nil
	s.wedgedUntil = time.Time{}
	s.dropUntil = time.Time{}
	s.mu.Unlock()
	s.log.Warn().Msg("sim: restarted")
}

// SetCapabilities changes what new sessions are told.
func (s *Sim) SetCapabilities(caps []string) {
	s.mu.Lock()
	s.cfg.Capabilities = append([]string(nil), caps...)
	s.mu.Unlock()
}

// Configure changes costs and timing for commands queued from now on.
func (s *Sim) Configure(change func(*Config)) {
	s.mu.Lock()
	change(&s.cfg)
	s.mu.Unlock()
}

// Stats returns a snapshot of the counters.
func (s *Sim) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Commands = copyCounts(s.stats.Commands)
	st.Executed = copyCounts(s.stats.Executed)
	st.Alarms.Subscribes = copyCounts(s.stats.Alarms.Subscribes)
	st.Alarms.Acks = append([]AckRecord(nil), s.stats.Alarms.Acks...)
	st.Sessions = len(s.sessions)
	st.QueueLength = len(s.queue)
	for _, sess := range s.sessions {
		sess.mu.Lock()
		for _, it := range sess.items {
			if it.advised {
				st.AdvisedItems++
			}
		}
		sess.mu.Unlock()
	}
	return st
}

// ResetStats zeroes the counters (peaks restart from the current in-flight).
func (s *Sim) ResetStats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	inFlight := s.stats.InFlight
	s.resetStatsLocked()
	s.stats.InFlight = inFlight
}

func (s *Sim) resetStatsLocked() {
	s.stats = Stats{Commands: map[string]int64{}, Executed: map[string]int64{}, Alarms: AlarmStats{Subscribes: map[string]int64{}}}
}

func copyCounts(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (s *Sim) closeSessionsLocked() {
	for id, sess := range s.sessions {
		close(sess.closed)
		delete(s.sessions, id)
	}
}

// --- gRPC service ---

// OpenSession implements the gateway service.
func (s *Sim) OpenSession(_ context.Context, req *pb.OpenSessionRequest) (*pb.OpenSessionReply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	timeout := s.cfg.DefaultCommandTimeout
	s.stats.LastRequestedTimeout = 0
	if req.GetCommandTimeout() != nil {
		d := req.GetCommandTimeout().AsDuration()
		if d <= 0 {
			return nil, status.Error(codes.InvalidArgument, "command_timeout must be > 0")
		}
		s.stats.LastRequestedTimeout = d
		timeout = d
		if s.cfg.MaxCommandTimeout > 0 && timeout > s.cfg.MaxCommandTimeout {
			timeout = s.cfg.MaxCommandTimeout
		}
	}
	s.nextSession++
	sess := &session{
		id:            fmt.Sprintf("s%d-%d", s.gen, s.nextSession),
		serverHandle:  int32(s.nextSession),
		timeout:       timeout,
		supervisory:   req.GetWriteUserId() == 0,
		closed:        make(chan struct{}),
		events:        make(chan *pb.MxEvent, 8192),
		items:         make(map[int32]*item),
		alarmSources:  map[string]bool{},
		alarmInFlight: map[string]int64{},
		alarmEvents:   make(chan *pb.AlarmEvent, 8192),
	}
	s.sessions[sess.id] = sess
	s.stats.SessionsOpened++
	return &pb.OpenSessionReply{
		SessionId:              sess.id,
		ServerHandle:           sess.serverHandle,
		GatewayName:            s.cfg.Name,
		GatewayVersion:         "sim",
		Capabilities:           append([]string(nil), s.cfg.Capabilities...),
		DefaultCommandTimeout:  durationpb.New(timeout),
		GatewayProtocolVersion: ProtocolVersion,
	}, nil
}

// CloseSession implements the gateway service.
func (s *Sim) CloseSession(_ context.Context, req *pb.CloseSessionRequest) (*pb.CloseSessionReply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.sessions[req.GetSessionId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "session %q not found", req.GetSessionId())
	}
	close(sess.closed)
	delete(s.sessions, sess.id)
	return &pb.CloseSessionReply{}, nil
}

// StreamEvents implements the gateway service.
func (s *Sim) StreamEvents(req *pb.StreamEventsRequest, stream pb.MxAccessGateway_StreamEventsServer) error {
	s.mu.Lock()
	sess, ok := s.sessions[req.GetSessionId()]
	s.mu.Unlock()
	if !ok {
		return status.Errorf(codes.NotFound, "session %q not found", req.GetSessionId())
	}
	for {
		select {
		case ev := <-sess.events:
			if ev == nil {
				return nil // graceful end; the session stays valid
			}
			if err := stream.Send(ev); err != nil {
				return err
			}
			s.mu.Lock()
			s.stats.EventsSent++
			s.mu.Unlock()
		case <-sess.closed:
			return status.Error(codes.Unavailable, "session closed")
		case <-s.stop:
			return status.Error(codes.Unavailable, "gateway stopping")
		case <-stream.Context().Done():
			return nil
		}
	}
}

// EndEventStreams ends every open event stream gracefully (status OK) while
// the sessions stay valid: clients must not treat it as a disconnect.
func (s *Sim) EndEventStreams() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sess := range s.sessions {
		sess.endStreams()
	}
}

// Invoke implements the gateway service: the command is queued on the
// apartment and answered when it ran, or DEADLINE_EXCEEDED after the
// session's command timeout, whichever is first.
func (s *Sim) Invoke(ctx context.Context, req *pb.MxCommandRequest) (*pb.MxCommandReply, error) {
	kind := gateway.CommandKind(req.GetCommand())
	s.mu.Lock()
	s.stats.Commands[kind]++
	sess, ok := s.sessions[req.GetSessionId()]
	if !ok {
		s.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "session %q not found", req.GetSessionId())
	}
	if kind == gateway.KindUnknown {
		s.mu.Unlock()
		return nil, status.Error(codes.InvalidArgument, "unknown command")
	}
	cost := s.costLocked(kind, req.GetCommand())
	run, err := s.prepare(ctx, sess, req)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	source := req.GetCommand().GetSubscribeAlarms().GetSource()
	if kind == gateway.KindSubscribeAlarms {
		s.trackAlarmInFlightLocked(sess, source, +1)
		defer func() {
			s.mu.Lock()
			s.trackAlarmInFlightLocked(sess, source, -1)
			s.mu.Unlock()
		}()
	}
	s.mu.Unlock()
	return s.runJob(ctx, sess, kind, cost, req.GetClientCorrelationId(), run)
}

// runJob queues run on the apartment and answers when it ran, or
// DEADLINE_EXCEEDED after the session's command timeout, whichever is
// first; a reply being dropped is never answered.
func (s *Sim) runJob(ctx context.Context, sess *session, kind string, cost time.Duration, corr string, run func() (*pb.MxCommandReply, error)) (*pb.MxCommandReply, error) {
	s.mu.Lock()
	j := &job{kind: kind, sess: sess, done: make(chan result, 1), gen: s.gen, cost: cost, run: run}
	s.queue = append(s.queue, j)
	s.trackInFlightLocked(sess, kind, +1)
	timeout := sess.timeout
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.trackInFlightLocked(sess, kind, -1)
		s.mu.Unlock()
	}()
	select {
	case s.wake <- struct{}{}:
	default:
	}

	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	select {
	case r := <-j.done:
		if s.dropping(kind) {
			s.mu.Lock()
			s.stats.RepliesDropped++
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			case <-sess.closed:
				return nil, status.Error(codes.Unavailable, "session closed")
			case <-s.stop:
				return nil, status.Error(codes.Unavailable, "gateway stopping")
			}
		}
		if r.err != nil {
			return nil, r.err
		}
		r.reply.SessionId = sess.id
		r.reply.ClientCorrelationId = corr
		return r.reply, nil
	case <-deadline.C:
		j.abandoned.Store(true)
		s.mu.Lock()
		s.stats.DeadlineExceeded++
		s.mu.Unlock()
		return nil, status.Errorf(codes.DeadlineExceeded, "%s did not complete within %s", kind, timeout)
	case <-ctx.Done():
		j.abandoned.Store(true)
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-sess.closed:
		j.abandoned.Store(true)
		return nil, status.Error(codes.Unavailable, "session closed")
	case <-s.stop:
		return nil, status.Error(codes.Unavailable, "gateway stopping")
	}
}

func (s *Sim) trackInFlightLocked(sess *session, kind string, delta int64) {
	s.stats.InFlight += delta
	sess.inFlight += delta
	if sess.inFlight > s.stats.PeakInFlight {
		s.stats.PeakInFlight = sess.inFlight
	}
	if gateway.IsSubscribeKind(kind) {
		sess.subInFlight += delta
		if sess.subInFlight > s.stats.PeakSubscribeInFlight {
			s.stats.PeakSubscribeInFlight = sess.subInFlight
		}
	}
}

func (s *Sim) dropping(kind string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !time.Now().Before(s.dropUntil) {
		return false
	}
	return s.dropKinds == nil || s.dropKinds[kind]
}

func (s *Sim) costLocked(kind string, c *pb.MxCommand) time.Duration {
	cost := s.cfg.CommandCost
	if k, ok := s.cfg.CostByKind[kind]; ok {
		cost = k
	}
	n := len(c.GetAddItemBulk().GetTagAddresses()) + len(c.GetSubscribeBulk().GetTagAddresses()) +
		len(c.GetAdviseItemBulk().GetItemHandles()) + len(c.GetRemoveItemBulk().GetItemHandles())
	if c.GetAdviseSupervisory() != nil {
		n = 1
	}
	return cost + time.Duration(n)*s.cfg.PerTagCost
}

// apartment is the single-threaded command apartment: one command at a time,
// in arrival order; a wedge holds it.
func (s *Sim) apartment() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		var j *job
		wait := time.Duration(0)
		if d := time.Until(s.wedgedUntil); d > 0 {
			wait = d
		} else if len(s.queue) > 0 {
			j = s.queue[0]
			s.queue = s.queue[1:]
		}
		skip := s.cfg.SkipAbandoned
		gen := s.gen
		s.mu.Unlock()

		if j == nil {
			var timer <-chan time.Time
			if wait > 0 {
				timer = time.After(wait)
			}
			select {
			case <-s.wake:
			case <-timer:
			case <-s.stop:
				return
			}
			continue
		}
		if j.gen != gen || (skip && j.abandoned.Load()) {
			continue
		}
		if j.cost > 0 {
			select {
			case <-time.After(j.cost):
			case <-s.stop:
				return
			}
		}
		reply, err := j.run()
		s.mu.Lock()
		s.stats.Executed[j.kind]++
		s.mu.Unlock()
		j.done <- result{reply: reply, err: err}
	}
}

// prepare validates a command and returns the work the apartment will do.
// Called with s.mu held.
func (s *Sim) prepare(ctx context.Context, sess *session, req *pb.MxCommandRequest) (func() (*pb.MxCommandReply, error), error) {
	c := req.GetCommand()
	badPrefix := s.cfg.BadTagPrefix
	switch k := c.GetKind().(type) {
	case *pb.MxCommand_Ping:
		return func() (*pb.MxCommandReply, error) {
			return &pb.MxCommandReply{Result: &pb.MxCommandReply_Ping{Ping: &pb.PingReply{}}}, nil
		}, nil
	case *pb.MxCommand_AddItemBulk:
		tags := k.AddItemBulk.GetTagAddresses()
		return func() (*pb.MxCommandReply, error) {
			items := make([]*pb.ItemStatus, len(tags))
			for i, tag := range tags {
				items[i] = sess.addItem(tag, badPrefix)
			}
			return &pb.MxCommandReply{Result: &pb.MxCommandReply_AddItemBulk{AddItemBulk: &pb.AddItemBulkReply{Items: items}}}, nil
		}, nil
	case *pb.MxCommand_AdviseSupervisory:
		h := k.AdviseSupervisory.GetItemHandle()
		return func() (*pb.MxCommandReply, error) {
			st := sess.advise(h, true)
			s.sendInitial(sess, h)
			return &pb.MxCommandReply{Result: &pb.MxCommandReply_AdviseSupervisory{AdviseSupervisory: &pb.AdviseSupervisoryReply{Item: st}}}, nil
		}, nil
	case *pb.MxCommand_AdviseItemBulk:
		handles := k.AdviseItemBulk.GetItemHandles()
		return func() (*pb.MxCommandReply, error) {
			items := make([]*pb.ItemStatus, len(handles))
			for i, h := range handles {
				items[i] = s.advisePlain(sess, h)
				s.sendInitial(sess, h)
			}
			return &pb.MxCommandReply{Result: &pb.MxCommandReply_AdviseItemBulk{AdviseItemBulk: &pb.AdviseItemBulkReply{Items: items}}}, nil
		}, nil
	case *pb.MxCommand_SubscribeBulk:
		tags := k.SubscribeBulk.GetTagAddresses()
		// An old gateway does not know field 3 and advises plain: exactly the
		// hazard the capability gate exists for.
		supervisory := k.SubscribeBulk.GetSupervisory() && s.hasCapLocked(gateway.CapBulkSubscribeSupervisory)
		return func() (*pb.MxCommandReply, error) {
			items := make([]*pb.ItemStatus, len(tags))
			for i, tag := range tags {
				st := sess.addItem(tag, badPrefix)
				if st.GetOk() {
					if supervisory {
						st = sess.advise(st.GetItemHandle(), true)
					} else {
						st = s.advisePlain(sess, st.GetItemHandle())
					}
					st.TagAddress = tag
					s.sendInitial(sess, st.GetItemHandle())
				}
				items[i] = st
			}
			return &pb.MxCommandReply{Result: &pb.MxCommandReply_SubscribeBulk{SubscribeBulk: &pb.SubscribeBulkReply{Items: items}}}, nil
		}, nil
	case *pb.MxCommand_RemoveItemBulk:
		handles := k.RemoveItemBulk.GetItemHandles()
		return func() (*pb.MxCommandReply, error) {
			items := make([]*pb.ItemStatus, len(handles))
			for i, h := range handles {
				items[i] = sess.removeItem(h)
			}
			return &pb.MxCommandReply{Result: &pb.MxCommandReply_RemoveItemBulk{RemoveItemBulk: &pb.RemoveItemBulkReply{Items: items}}}, nil
		}, nil
	case *pb.MxCommand_Read:
		tag := k.Read.GetTagAddress()
		return func() (*pb.MxCommandReply, error) {
			s.mu.Lock()
			v, ok := s.values[tag]
			if !ok {
				v = s.cfg.Kinds[tag].value(s.step, &item{tag: tag})
			}
			s.mu.Unlock()
			pv, _ := gateway.ValueToProto(v)
			return &pb.MxCommandReply{Result: &pb.MxCommandReply_Read{Read: &pb.ReadReply{
				Value: pv, Quality: int32(field.QualityGood), Timestamp: gateway.TimestampToProto(time.Now()),
			}}}, nil
		}, nil
	case *pb.MxCommand_SubscribeAlarms:
		if !s.hasCapLocked(gateway.CapStreamActiveAlarms) {
			return nil, status.Error(codes.InvalidArgument, "unknown command")
		}
		if k.SubscribeAlarms.GetSource() == "" {
			return nil, status.Error(codes.InvalidArgument, "subscribe alarms: source is empty")
		}
		return s.subscribeAlarmsLocked(sess, k.SubscribeAlarms.GetSource()), nil
	case *pb.MxCommand_Write:
		if err := s.checkEpochLocked(ctx); err != nil {
			return nil, err
		}
		tag := k.Write.GetTagAddress()
		v := gateway.ValueFromProto(k.Write.GetValue())
		return func() (*pb.MxCommandReply, error) {
			s.mu.Lock()
			s.values[tag] = v
			s.mu.Unlock()
			return &pb.MxCommandReply{Result: &pb.MxCommandReply_Write{Write: &pb.WriteReply{}}}, nil
		}, nil
	}
	return nil, status.Error(codes.InvalidArgument, "unknown command")
}

// checkEpochLocked fences writes: a write stamped with an epoch older than
// the newest one seen comes from a node that lost the Active role. (A scadad
// extension; the real gateway does not fence.)
func (s *Sim) checkEpochLocked(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(gateway.EpochMetadataKey)
	if len(vals) == 0 {
		s.stats.WritesWithoutEpoch++
		return nil
	}
	e, err := gateway.ParseEpoch(vals[0])
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "%v", err)
	}
	if e.Less(s.highestEpoch) {
		s.stats.StaleEpochWrites++
		return status.Errorf(codes.FailedPrecondition, "stale epoch %s, newest seen %s", e, s.highestEpoch)
	}
	s.highestEpoch = e
	return nil
}

func (s *Sim) hasCapLocked(c string) bool {
	for _, x := range s.cfg.Capabilities {
		if x == c {
			return true
		}
	}
	return false
}

func (s *Sim) advisePlain(sess *session, h int32) *pb.ItemStatus {
	st := sess.advise(h, false)
	if st.GetOk() && sess.supervisory {
		s.mu.Lock()
		s.stats.PlainAdviseOnSupervisory++
		s.mu.Unlock()
	}
	return st
}

// sendInitial queues the value an advise reports at once (MXAccess sends
// OnDataChange right after advise).
func (s *Sim) sendInitial(sess *session, h int32) {
	sess.mu.Lock()
	it, ok := sess.items[h]
	sess.mu.Unlock()
	if !ok || !it.advised {
		return
	}
	s.mu.Lock()
	v, ok := s.values[it.tag]
	if !ok {
		// Of the tag's kind: a Boolean attribute must never see a Double.
		v = s.cfg.Kinds[it.tag].value(s.step, it)
	}
	s.mu.Unlock()
	sess.emit(sess.serverHandle, it, v)
}

// changer gives every advised item a new value each ChangeInterval, unless
// the apartment is wedged (events come from the apartment).
func (s *Sim) changer() {
	defer s.wg.Done()
	var n int64
	for {
		s.mu.Lock()
		interval := s.cfg.ChangeInterval
		s.mu.Unlock()
		if interval <= 0 {
			interval = 100 * time.Millisecond
			select {
			case <-time.After(interval):
				continue
			case <-s.stop:
				return
			}
		}
		select {
		case <-time.After(interval):
		case <-s.stop:
			return
		}
		s.mu.Lock()
		if s.cfg.ChangeInterval <= 0 || time.Now().Before(s.wedgedUntil) {
			s.mu.Unlock()
			continue
		}
		n++
		s.step = n
		kinds := s.cfg.Kinds
		sessions := make([]*session, 0, len(s.sessions))
		for _, sess := range s.sessions {
			sessions = append(sessions, sess)
		}
		s.mu.Unlock()
		for _, sess := range sessions {
			sess.mu.Lock()
			items := make([]*item, 0, len(sess.items))
			for _, it := range sess.items {
				if it.advised {
					items = append(items, it)
				}
			}
			sess.mu.Unlock()
			for _, it := range items {
				v := kinds[it.tag].value(n, it)
				// The tag's current value: what a read or a new
				// subscriber (after a failover) gets, not 0.
				s.mu.Lock()
				s.values[it.tag] = v
				s.mu.Unlock()
				sess.emit(sess.serverHandle, it, v)
			}
		}
	}
}

func (sess *session) emit(serverHandle int32, it *item, v field.Value) {
	pv, err := gateway.ValueToProto(v)
	if err != nil {
		return
	}
	ev := &pb.MxEvent{Kind: &pb.MxEvent_DataChange{DataChange: &pb.DataChange{
		ServerHandle: serverHandle, ItemHandle: it.handle, TagAddress: it.tag, Value: pv,
		Quality: int32(field.QualityGood), Timestamp: gateway.TimestampToProto(time.Now()),
	}}}
	select {
	case sess.events <- ev:
	default: // a client that does not read loses events, as with a full gRPC window
	}
}

// endStreams is signalled through a nil event: StreamEvents returns OK.
func (sess *session) endStreams() {
	select {
	case sess.events <- nil:
	default:
	}
}

func (sess *session) addItem(tag, badPrefix string) *pb.ItemStatus {
	if tag == "" || (badPrefix != "" && len(tag) >= len(badPrefix) && tag[:len(badPrefix)] == badPrefix) {
		return &pb.ItemStatus{TagAddress: tag, Ok: false, Error: "unknown tag " + strconv.Quote(tag)}
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	sess.nextHandle++
	it := &item{handle: sess.nextHandle, tag: tag}
	sess.items[it.handle] = it
	return &pb.ItemStatus{TagAddress: tag, ItemHandle: it.handle, Ok: true}
}

func (sess *session) advise(h int32, supervisory bool) *pb.ItemStatus {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	it, ok := sess.items[h]
	if !ok {
		return &pb.ItemStatus{ItemHandle: h, Ok: false, Error: "unknown item handle"}
	}
	it.advised = true
	it.adviseSV = supervisory
	return &pb.ItemStatus{TagAddress: it.tag, ItemHandle: h, Ok: true}
}

func (sess *session) removeItem(h int32) *pb.ItemStatus {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	it, ok := sess.items[h]
	if !ok {
		return &pb.ItemStatus{ItemHandle: h, Ok: false, Error: "unknown item handle"}
	}
	delete(sess.items, h)
	return &pb.ItemStatus{TagAddress: it.tag, ItemHandle: h, Ok: true}
}
