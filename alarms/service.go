package alarms

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/activegate"
	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/gateway"
	"github.com/scadad/scadad/internal/backoff"
	"github.com/scadad/scadad/internal/clock"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/storeforward"
)

// Proposer commits a command through the leader; control.Forwarder is one.
type Proposer interface {
	Propose(ctx context.Context, cmd *fsmpb.Command) (*fsm.Result, error)
}

// State is the replicated alarm state; *fsm.FSM is one.
type State interface {
	Alarms() ([]*fsmpb.AlarmRecord, error)
	Alarm(id string) (*fsmpb.AlarmRecord, bool, error)
	AlarmLogPosition() (last, historyMark uint64, err error)
	AlarmLogAfter(seq uint64, limit int) ([]*fsmpb.AlarmTransition, error)
	Changes() (<-chan uint64, func())
}

// Acknowledger acknowledges an alarm on the gateway of a connection with
// the acknowledger's fencing epoch; subscribe.Manager is one.
type Acknowledger interface {
	AcknowledgeAlarm(ctx context.Context, connection, id, operator, comment string, epoch role.Epoch) error
}

// Alarm kinds, AlarmRecord.kind.
const (
	KindNative = "native"
	KindLimit  = "limit"
)

// ErrUnknownAlarm is returned for an operation on an alarm not known.
var ErrUnknownAlarm = errors.New("no such alarm")

// NotActiveError refuses a gated operation on a node that is not the
// Active; Reason is activegate's.
type NotActiveError struct {
	Op     string
	Reason string
}

// GateReason is the role gate's reason; the OPC UA server answers an
// error carrying one BadInvalidState.
func (e *NotActiveError) GateReason() string { return e.Reason }

func (e *NotActiveError) Error() string {
	return fmt.Sprintf("%s refused: this node is not the Active (%s); the Active node acknowledges alarms", e.Op, e.Reason)
}

// Options configure a Service.
type Options struct {
	Proposer Proposer
	State    State
	Roles    role.Source
	// Acknowledger reaches gateways; nil refuses native acknowledgements.
	Acknowledger Acknowledger
	// Enqueuer stores alarm history; nil emits none.
	Enqueuer storeforward.MessageEnqueuer
	Gate     *activegate.Counter
	Metrics  *Metrics
	NodeID   string
	Clock    clock.Clock
	Logger   zerolog.Logger
	// ProposeTimeout bounds each command (default 10 s).
	ProposeTimeout time.Duration
}

// Config is the site's alarm configuration.
type Config struct {
	// HistoryTarget is the store-and-forward target alarm transitions go
	// to; empty emits no history.
	HistoryTarget string
	Limits        []Limit
}

// Service is the alarm state machine's driver on one node.
type Service struct {
	opts Options
	log  zerolog.Logger

	cfgMu sync.Mutex
	cfg   Config
	acker Acknowledger

	queue  chan observation
	limits *limitEvaluator
}

// observation is field state to propose: streamed transitions (a
// source's full snapshot, refresh, is committed by the worker itself).
type observation struct {
	conds      []*fsmpb.AlarmCondition
	refresh    bool
	source     string
	connection string
}

// queueLength bounds the observations waiting to be proposed; a full
// queue holds up the gateway stream that feeds it (back-pressure).
const queueLength = 4096

// New checks opts and returns a service; Run starts it.
func New(opts Options) (*Service, error) {
	if opts.Proposer == nil || opts.State == nil || opts.Roles == nil {
		return nil, errors.New("alarms: Proposer, State and Roles are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.System()
	}
	if opts.ProposeTimeout <= 0 {
		opts.ProposeTimeout = 10 * time.Second
	}
	s := &Service{opts: opts, log: opts.Logger, queue: make(chan observation, queueLength), acker: opts.Acknowledger}
	// Every node evaluates the limit alarms; emit records a new level on
	// the Active only.
	s.limits = newLimitEvaluator(opts.Clock, s.emit)
	return s, nil
}

// SetConfig applies the site's alarm configuration.
func (s *Service) SetConfig(cfg Config) error {
	if err := s.limits.set(cfg.Limits); err != nil {
		return fmt.Errorf("alarm config: %w", err)
	}
	s.cfgMu.Lock()
	s.cfg = cfg
	s.cfgMu.Unlock()
	return nil
}

// SetAcknowledger sets what reaches the gateways (made after the
// service, by the daemon).
func (s *Service) SetAcknowledger(a Acknowledger) {
	s.cfgMu.Lock()
	s.acker = a
	s.cfgMu.Unlock()
}

func (s *Service) acknowledger() Acknowledger {
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	return s.acker
}

func (s *Service) config() Config {
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	return s.cfg
}

func (s *Service) active() (role.State, bool, string) {
	st := s.opts.Roles.Current()
	ok, reason := activegate.Decide(st)
	return st, ok, reason
}

// AlarmSnapshot implements subscribe.AlarmSink: a source's full condition
// state from a subscribe (first, or after a session change). It is
// recorded before the subscribe counts as confirmed, and refused on a node
// that is not the Active (a hot Standby's workers read, the Active
// records): the worker then retries.
func (s *Service) AlarmSnapshot(ctx context.Context, connection, source string, alarms []gateway.Alarm) error {
	if _, ok, reason := s.active(); !ok {
		return &NotActiveError{Op: "record an alarm refresh", Reason: reason}
	}
	conds := make([]*fsmpb.AlarmCondition, 0, len(alarms))
	for _, a := range alarms {
		if a.Source == source {
			conds = append(conds, nativeCondition(connection, a))
		}
	}
	o := observation{conds: conds, refresh: true, source: source, connection: connection}
	if _, err := s.commit(ctx, &fsmpb.Command{Body: &fsmpb.Command_AlarmObserve{AlarmObserve: &fsmpb.AlarmObserve{
		Conditions: conds, RefreshSource: source, RefreshConnection: connection}}}); err != nil {
		return fmt.Errorf("record the refresh of %q on %q: %w", source, connection, err)
	}
	s.reconcileAcks(ctx, o)
	return nil
}

// AlarmChange implements subscribe.AlarmSink: one streamed transition.
func (s *Service) AlarmChange(connection string, a gateway.Alarm) {
	s.emit(nativeCondition(connection, a))
}

// emit queues an observed condition for the Active to record. A hot
// Standby's (or the witness's) observation is the Active's to record and
// is dropped here, counted. A node whose role is not settled (Detached: an
// Active whose quorum confirmation is late for a moment, or a node between
// leaders) queues it, and propose decides once the role is known: the
// gateway streams each transition once, and dropping it on an Active that
// was unconfirmed for a moment would lose it until the next refresh.
func (s *Service) emit(c *fsmpb.AlarmCondition) {
	o := observation{conds: []*fsmpb.AlarmCondition{c}}
	st, ok, reason := s.active()
	switch {
	case ok:
		s.enqueue(o)
	case unsettled(st):
		// Never waits for room: a node cut off from the cluster for long
		// must not slow its gateway stream down.
		select {
		case s.queue <- o:
		default:
			s.opts.Gate.Denied(activegate.SurfaceAlarmEmit, reason)
		}
	default:
		s.opts.Gate.Denied(activegate.SurfaceAlarmEmit, reason)
	}
}

// unsettled reports a role that may turn out to be the Active's: neither
// Active nor a Standby or witness.
func unsettled(st role.State) bool {
	return st.Role != role.Active && st.Role != role.Standby && st.Role != role.Witness
}

// unsettledWait bounds how long a queued observation waits for an
// unsettled role to become the Active; after it, the observation is
// dropped and whichever node is the Active records the source's state at
// its refresh. gateRecheck is how often the role is looked at meanwhile.
const (
	unsettledWait = 3 * time.Second
	gateRecheck   = 10 * time.Millisecond
)

// waitActive reports whether this node is the Active, waiting up to
// unsettledWait while its role is unsettled.
func (s *Service) waitActive(ctx context.Context) bool {
	deadline := s.opts.Clock.Now().Add(unsettledWait)
	for {
		st, ok, _ := s.active()
		switch {
		case ok:
			return true
		case !unsettled(st) || !s.opts.Clock.Now().Before(deadline):
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-s.opts.Clock.After(gateRecheck):
		}
	}
}

func (s *Service) enqueue(o observation) {
	select {
	case s.queue <- o:
		return
	default:
	}
	t := s.opts.Clock.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case s.queue <- o:
	case <-t.C():
		// The next refresh (a new session or a new Active) recovers it.
		s.opts.Metrics.dropped()
		s.log.Error().Str("source", o.source).Int("conditions", len(o.conds)).Msg("alarm observation dropped: the proposer is behind")
	}
}

func nativeCondition(connection string, a gateway.Alarm) *fsmpb.AlarmCondition {
	sev := min(max(a.Severity, 1), 1000)
	var ts int64
	if !a.Time.IsZero() {
		ts = a.Time.UnixNano()
	}
	return &fsmpb.AlarmCondition{
		AlarmId: a.ID, Source: a.Source, ConditionName: a.Condition, Severity: sev, Message: a.Message,
		Active: a.Active, Acked: a.Acked, ConditionState: a.State, TransitionUnixNano: ts, GatewaySeq: a.Seq,
		AckOperator: a.AckOperator, AckComment: a.AckComment, Kind: KindNative, Connection: connection,
	}
}

// Run proposes observations, emits history and keeps the metrics until
// ctx ends.
func (s *Service) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); s.expireShelves(ctx) }()
	go func() { defer wg.Done(); s.proposeLoop(ctx) }()
	go func() { defer wg.Done(); s.followState(ctx) }()
	go func() { defer wg.Done(); s.limits.run(ctx) }()
	wg.Wait()
	return nil
}

// proposeLoop commits queued observations: streamed transitions gathered
// into one command (an alarm at most once per command).
func (s *Service) proposeLoop(ctx context.Context) {
	for {
		var first observation
		select {
		case <-ctx.Done():
			return
		case first = <-s.queue:
		}
		batch := []observation{first}
	gather:
		for len(batch) < 256 {
			select {
			case o := <-s.queue:
				batch = append(batch, o)
			default:
				break gather
			}
		}
		var pending []*fsmpb.AlarmCondition
		seen := map[string]bool{}
		flush := func() {
			if len(pending) > 0 {
				s.propose(ctx, &fsmpb.AlarmObserve{Conditions: pending})
			}
			pending, seen = nil, map[string]bool{}
		}
		for _, o := range batch {
			for _, c := range o.conds {
				if seen[c.AlarmId] || len(pending) >= fsm.MaxAlarmConditions {
					flush()
				}
				seen[c.AlarmId] = true
				pending = append(pending, c)
			}
		}
		flush()
	}
}

// proposeAttempts bounds the commits of one observation while this node
// stays the Active: a commit that failed for a moment (a proposal that
// timed out on a loaded leader) is tried again, with proposeRetryFloor to
// proposeRetryMax between attempts, rather than left to a refresh that may
// be hours away. Observing the same state again makes no transition.
const (
	proposeAttempts   = 4
	proposeRetryFloor = 100 * time.Millisecond
	proposeRetryMax   = time.Second
)

func (s *Service) propose(ctx context.Context, obs *fsmpb.AlarmObserve) bool {
	for attempt := 1; ; attempt++ {
		if !s.waitActive(ctx) {
			s.log.Info().Int("conditions", len(obs.Conditions)).Msg("alarm observation not recorded here: this node is not the Active (the Active records the source's state at its refresh)")
			return false
		}
		_, err := s.commit(ctx, &fsmpb.Command{Body: &fsmpb.Command_AlarmObserve{AlarmObserve: obs}})
		if err == nil {
			return true
		}
		var refused *fsm.CommandError
		if attempt >= proposeAttempts || errors.As(err, &refused) || ctx.Err() != nil {
			s.log.Warn().Err(err).Int("conditions", len(obs.Conditions)).Int("attempts", attempt).Str("refresh_source", obs.RefreshSource).
				Msg("alarm observation not recorded; the next refresh recovers it")
			return false
		}
		s.log.Info().Err(err).Int("conditions", len(obs.Conditions)).Int("attempt", attempt).Msg("alarm observation not recorded yet; trying again")
		select {
		case <-ctx.Done():
			return false
		case <-s.opts.Clock.After(backoff.Delay(proposeRetryFloor, proposeRetryMax, attempt, 0.5)):
		}
	}
}

func (s *Service) commit(ctx context.Context, cmd *fsmpb.Command) (*fsm.Result, error) {
	cmd.Version = fsm.CommandVersion
	cmd.StampUnixNano = s.opts.Clock.Now().UnixNano()
	if cmd.Actor == "" {
		cmd.Actor = s.opts.NodeID
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.ProposeTimeout)
	defer cancel()
	res, err := s.opts.Proposer.Propose(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return res, res.Err
	}
	return res, nil
}

// reconcileAcks sends the gateway the replicated acknowledgements it
// lacks: an Active that recorded an operator's acknowledgement and died
// before the gateway answered (or a gateway that lost it) leaves the field
// unacknowledged while the state says acknowledged.
func (s *Service) reconcileAcks(ctx context.Context, o observation) {
	for _, c := range o.conds {
		if c.Acked || !c.Active {
			continue
		}
		rec, ok, err := s.opts.State.Alarm(c.AlarmId)
		if err != nil || !ok || !rec.Acked || !rec.Active {
			continue
		}
		st, allow, _ := s.active()
		acker := s.acknowledger()
		if !allow || acker == nil {
			return
		}
		actx, cancel := context.WithTimeout(ctx, s.opts.ProposeTimeout)
		err = acker.AcknowledgeAlarm(actx, o.connection, c.AlarmId, rec.AckOperator, rec.AckComment, st.Epoch)
		cancel()
		if err != nil {
			s.log.Warn().Err(err).Str("alarm", c.AlarmId).Msg("replicated acknowledgement not accepted by the gateway")
			continue
		}
		s.log.Info().Str("alarm", c.AlarmId).Str("operator", rec.AckOperator).Msg("replicated acknowledgement re-sent to the gateway")
	}
}

// Acknowledge acknowledges alarm id as operator: on the gateway first for
// a native alarm (the operator hears of a refusal, e.g. a stale epoch),
// then in the replicated state. An Active that dies between the two leaves
// the gateway acknowledged and the state not: the new Active's refresh
// records it from the gateway, operator included. Only the Active does it.
func (s *Service) Acknowledge(ctx context.Context, id, operator, comment string) error {
	return s.ack(ctx, id, operator, comment, false)
}

// Confirm confirms an acknowledged alarm as operator; Active only.
func (s *Service) Confirm(ctx context.Context, id, operator, comment string) error {
	return s.ack(ctx, id, operator, comment, true)
}

func (s *Service) ack(ctx context.Context, id, operator, comment string, confirm bool) error {
	op := "acknowledge"
	if confirm {
		op = "confirm"
	}
	st, allow, reason := s.active()
	if !allow {
		s.opts.Gate.Denied(activegate.SurfaceAck, reason)
		s.log.Warn().Str("alarm", id).Str("reason", reason).Str("operator", operator).Msg("alarm " + op + " denied by the role gate")
		return &NotActiveError{Op: op, Reason: reason}
	}
	if operator == "" {
		return fmt.Errorf("%s alarm %q: operator is empty", op, id)
	}
	rec, ok, err := s.opts.State.Alarm(id)
	if err != nil {
		return fmt.Errorf("%s alarm %q: %w", op, id, err)
	}
	if !ok {
		return fmt.Errorf("%s alarm %q: %w", op, id, ErrUnknownAlarm)
	}
	if !confirm && rec.Kind == KindNative && !rec.Acked {
		acker := s.acknowledger()
		if acker == nil {
			return fmt.Errorf("acknowledge alarm %q: no gateway connections on this node", id)
		}
		if err := acker.AcknowledgeAlarm(ctx, rec.Connection, id, operator, comment, st.Epoch); err != nil {
			return fmt.Errorf("acknowledge alarm %q on connection %q: %w", id, rec.Connection, err)
		}
	}
	_, err = s.commit(ctx, &fsmpb.Command{Actor: operator, Body: &fsmpb.Command_AlarmAck{AlarmAck: &fsmpb.AlarmAck{AlarmId: id, Operator: operator, Comment: comment, Confirm: confirm}}})
	if err != nil {
		return fmt.Errorf("%s alarm %q: record: %w", op, id, err)
	}
	return nil
}

// Shelve shelves (or unshelves) an alarm until until (zero: until
// unshelved). Any node may: the command is committed through the leader.
func (s *Service) Shelve(ctx context.Context, id, operator string, shelve bool, until time.Time, comment string) error {
	var u int64
	if shelve && !until.IsZero() {
		// An unshelve carries an end only when it ends a timed shelve
		// (expireShelves): the FSM then unshelves only that shelve.
		u = until.UnixNano()
	}
	_, err := s.commit(ctx, &fsmpb.Command{Actor: operator, Body: &fsmpb.Command_AlarmShelve{AlarmShelve: &fsmpb.AlarmShelve{
		AlarmId: id, Operator: operator, Shelve: shelve, UntilUnixNano: u, Comment: comment}}})
	if err != nil {
		return fmt.Errorf("shelve alarm %q: %w", id, err)
	}
	return nil
}

// Comment adds an operator comment to an alarm.
func (s *Service) Comment(ctx context.Context, id, operator, comment string) error {
	_, err := s.commit(ctx, &fsmpb.Command{Actor: operator, Body: &fsmpb.Command_AlarmComment{AlarmComment: &fsmpb.AlarmComment{
		AlarmId: id, Operator: operator, Comment: comment}}})
	if err != nil {
		return fmt.Errorf("comment on alarm %q: %w", id, err)
	}
	return nil
}

// List returns every alarm's replicated state, in id order.
func (s *Service) List() ([]*fsmpb.AlarmRecord, error) { return s.opts.State.Alarms() }
