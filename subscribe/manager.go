package subscribe

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/field"
	"github.com/scadad/scadad/gateway"
	"github.com/scadad/scadad/internal/clock"
	"github.com/scadad/scadad/role"
)

// RoleSource is the part of the role stream the manager follows;
// *role.Broadcaster implements it.
type RoleSource interface {
	Watch() (<-chan role.State, func())
}

// Options configure a Manager.
type Options struct {
	// Role decides when workers run. Required.
	Role RoleSource
	// HotStandby also runs workers (read-only) on a Standby node.
	HotStandby bool
	// Sink receives values and qualities. Required.
	Sink Sink
	// Alarms receives alarm snapshots and transitions of the configured
	// alarm sources; nil drops them.
	Alarms AlarmSink
	// Dialer makes connections; nil dials real gateways (GatewayDialer with
	// gateway metrics registered on Registerer).
	Dialer Dialer
	Policy RetryPolicy
	// Registerer receives the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	Logger     zerolog.Logger
	Clock      clock.Clock
	Rand       func() float64
}

// Manager runs the subscribe workers: one per (connection, instance), while
// the role allows, reconfigured by difference.
type Manager struct {
	opts    Options
	metrics *Metrics
	dialer  Dialer
	log     zerolog.Logger

	mu      sync.Mutex
	desired Config
	kick    chan struct{}

	// Owned by Run; connsMu guards conns for readers outside Run (Route,
	// Status).
	connsMu sync.RWMutex
	conns   map[string]*connection
	workers map[string]*workerHandle

	statusMu sync.Mutex
	status   map[string]*Worker

	// background tracks best-effort item removals of stopped workers, so a
	// wedged gateway cannot stall reconfiguration.
	background sync.WaitGroup
}

type workerHandle struct {
	// inst is the instance of a tag worker; an alarm worker has none
	// (alarm is its source).
	inst   InstanceConfig
	alarm  AlarmSourceConfig
	conn   *connection
	name   string // the worker's key within its connection
	w      *Worker
	sub    subscriptionState
	cancel context.CancelFunc
	done   chan struct{}
}

// subscriptionState is what the manager does to a worker's subscription
// besides driving it: forget it when its session is replaced, release it
// when the worker stops (returning the gateway cleanup to run, or nil).
type subscriptionState interface {
	reset()
	release() func()
}

// NewManager checks opts and returns a manager; Run starts it.
func NewManager(opts Options) (*Manager, error) {
	if opts.Role == nil || opts.Sink == nil {
		return nil, errors.New("subscribe manager: Role and Sink are required")
	}
	opts.Policy = opts.Policy.withDefaults()
	if err := opts.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("subscribe manager: %w", err)
	}
	if opts.Clock == nil {
		opts.Clock = clock.System()
	}
	if opts.Rand == nil {
		opts.Rand = rand.Float64
	}
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Manager{
		opts: opts, dialer: opts.Dialer, log: opts.Logger,
		kick: make(chan struct{}, 1), conns: map[string]*connection{},
		workers: map[string]*workerHandle{}, status: map[string]*Worker{},
	}
	var err error
	if m.metrics, err = NewMetrics(reg); err != nil {
		return nil, err
	}
	if m.dialer == nil {
		gm, err := gateway.NewMetrics(reg)
		if err != nil {
			return nil, err
		}
		m.dialer = GatewayDialer{Metrics: gm, Logger: opts.Logger}
	}
	return m, nil
}

// Apply makes cfg the desired configuration. Workers whose instance did not
// change keep running untouched; others are started, stopped or restarted.
func (m *Manager) Apply(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("apply subscribe config: %w", err)
	}
	m.mu.Lock()
	m.desired = cfg.clone()
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
	return nil
}

// Route resolves an instance attribute to the running connection that
// carries it and its tag address, for forwarding a device write that the
// caller (the OPC UA write gate) has already allowed. It fails when the
// attribute is unknown or its connection is not running on this node.
// Subscribe itself never writes.
func (m *Manager) Route(instance, attribute string) (TagWriter, string, error) {
	m.mu.Lock()
	var conn, tag string
	for _, in := range m.desired.Instances {
		if in.Name != instance {
			continue
		}
		for _, a := range in.Attributes {
			if a.Name == attribute {
				conn, tag = in.Connection, a.Tag
			}
		}
	}
	m.mu.Unlock()
	if tag == "" {
		return nil, "", fmt.Errorf("route %s/%s: no such attribute", instance, attribute)
	}
	m.connsMu.RLock()
	c, ok := m.conns[conn]
	m.connsMu.RUnlock()
	if !ok {
		return nil, "", fmt.Errorf("route %s/%s: connection %q not running on this node", instance, attribute, conn)
	}
	w, ok := c.conn.(TagWriter)
	if !ok {
		return nil, "", fmt.Errorf("route %s/%s: connection %q cannot write", instance, attribute, conn)
	}
	return w, tag, nil
}

// Status returns a snapshot of every running worker, sorted by instance
// and connection.
func (m *Manager) Status() []WorkerStatus {
	m.statusMu.Lock()
	out := make([]WorkerStatus, 0, len(m.status))
	for _, w := range m.status {
		out = append(out, w.Status())
	}
	m.statusMu.Unlock()
	m.connsMu.RLock()
	for i := range out {
		if c := m.conns[out[i].Connection]; c != nil {
			out[i].Endpoint = c.cfg.Endpoint
		}
	}
	m.connsMu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Instance != out[j].Instance {
			return out[i].Instance < out[j].Instance
		}
		return out[i].Connection < out[j].Connection
	})
	return out
}

// Run follows the role until ctx ends, then stops everything.
func (m *Manager) Run(ctx context.Context) error {
	roles, stop := m.opts.Role.Watch()
	defer stop()
	allowed := false
	var last role.State
	for {
		select {
		case <-ctx.Done():
			m.reconcile(Config{})
			m.background.Wait()
			return nil
		case last = <-roles:
		case <-m.kick:
		}
		m.mu.Lock()
		want := m.desired
		m.mu.Unlock()
		// Hot standby is a site-wide choice: the deployed config can turn it
		// on as well as the manager's options.
		hot := m.opts.HotStandby || want.HotStandby
		was := allowed
		allowed = last.Role.ReadsField(hot)
		if was != allowed {
			m.log.Info().Str("role", last.Role.String()).Str("epoch", last.Epoch.String()).Bool("hot_standby", hot).Bool("workers", allowed).Msg("subscribe workers follow the role")
		}
		if !allowed {
			want = Config{}
		}
		m.reconcile(want)
	}
}

// reconcile moves the running connections and workers to want.
func (m *Manager) reconcile(want Config) {
	wantConns := map[string]ConnectionConfig{}
	for _, c := range want.Connections {
		wantConns[c.Name] = c
	}
	wantInsts := map[string]InstanceConfig{}
	for _, in := range want.Instances {
		wantInsts[in.key()] = in
	}
	wantAlarms := map[string]AlarmSourceConfig{}
	for _, a := range want.AlarmSources {
		wantAlarms[a.key()] = a
	}
	// Connections that go or change take their workers with them.
	for name, c := range m.conns {
		if wc, ok := wantConns[name]; ok && wc == c.cfg {
			continue
		}
		var stopped []InstanceConfig
		for key, h := range m.workers {
			if h.conn.cfg.Name == name {
				m.stopWorker(key, false)
				stopped = append(stopped, h.inst)
			}
		}
		c.stop()
		m.connsMu.Lock()
		delete(m.conns, name)
		m.connsMu.Unlock()
		// Values from this node are no longer live.
		now := time.Now()
		for _, in := range stopped {
			for _, a := range in.Attributes {
				m.opts.Sink.TagUpdate(in.Name, a.Name, nil, field.QualityBadNotConnected, now)
			}
		}
	}
	for key, h := range m.workers {
		if h.alarm.Source != "" {
			if _, ok := wantAlarms[key]; !ok {
				m.stopWorker(key, true)
			}
			continue
		}
		if in, ok := wantInsts[key]; !ok || !in.equal(h.inst) {
			m.stopWorker(key, true)
		}
	}
	for name, cc := range wantConns {
		if _, ok := m.conns[name]; ok {
			continue
		}
		c, err := m.startConnection(cc)
		if err != nil {
			m.log.Error().Err(err).Str("connection", name).Msg("start connection")
			continue
		}
		m.connsMu.Lock()
		m.conns[name] = c
		m.connsMu.Unlock()
	}
	for key, in := range wantInsts {
		if _, ok := m.workers[key]; ok {
			continue
		}
		c, ok := m.conns[in.Connection]
		if !ok {
			continue
		}
		m.startWorker(c, in)
	}
	for key, a := range wantAlarms {
		if _, ok := m.workers[key]; ok {
			continue
		}
		c, ok := m.conns[a.Connection]
		if !ok {
			continue
		}
		m.startAlarmWorker(c, a)
	}
}

// policy is the subscribe retry of connection cc: its own, with the
// manager's filling in what it leaves zero.
func (m *Manager) policy(cc ConnectionConfig) RetryPolicy {
	return cc.Options.Policy.filledFrom(m.opts.Policy)
}

func (m *Manager) startConnection(cc ConnectionConfig) (*connection, error) {
	c := &connection{cfg: cc, sink: m.opts.Sink, alarms: m.opts.Alarms, alarmSources: map[string]int{}, routes: map[int32]target{}, early: map[int32]gateway.DataChange{}, workers: map[string]*workerHandle{},
		log: m.log.With().Str("connection", cc.Name).Logger()}
	conn, err := m.dialer.Dial(cc, c)
	if err != nil {
		return nil, err
	}
	c.conn = conn
	c.co = &coalescer{conn: conn, name: cc.Name, timeout: m.policy(cc).InFlightCeiling, metrics: m.metrics, log: c.log}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.done = make(chan struct{})
	go func() {
		defer close(c.done)
		if err := conn.Run(ctx); err != nil {
			c.log.Error().Err(err).Msg("connection stopped")
		}
	}()
	return c, nil
}

func (m *Manager) startWorker(c *connection, in InstanceConfig) {
	life, endLife := context.WithCancel(context.Background())
	sub := &tagSubscription{conn: c, inst: in, life: life, endLife: endLife, handles: map[string]int32{}, settled: map[string]bool{}}
	w := NewWorker(sub, WorkerOptions{Connection: in.Connection, Instance: in.Name, Policy: m.policy(c.cfg),
		Clock: m.opts.Clock, Rand: m.opts.Rand, Logger: m.log, Metrics: m.metrics})
	ctx, cancel := context.WithCancel(context.Background())
	// Instance names are unique within a connection.
	h := &workerHandle{inst: in, conn: c, name: in.Name, w: w, sub: sub, cancel: cancel, done: make(chan struct{})}
	m.runWorker(in.key(), h, ctx)
}

// startAlarmWorker runs the guarded subscribe of one alarm source: the
// same Worker and Guard as the tag workers, one in flight per (connection,
// source).
func (m *Manager) startAlarmWorker(c *connection, a AlarmSourceConfig) {
	sub := &alarmSubscription{conn: c, source: a.Source}
	w := NewWorker(sub, WorkerOptions{Connection: a.Connection, Instance: alarmWorkerLabel(a.Source), Policy: m.policy(c.cfg),
		Clock: m.opts.Clock, Rand: m.opts.Rand, Logger: m.log, Metrics: m.metrics})
	ctx, cancel := context.WithCancel(context.Background())
	h := &workerHandle{alarm: a, conn: c, name: alarmWorkerKey(a.Source), w: w, sub: sub, cancel: cancel, done: make(chan struct{})}
	c.addAlarmSource(a.Source)
	m.runWorker(a.key(), h, ctx)
}

func (m *Manager) runWorker(key string, h *workerHandle, ctx context.Context) {
	h.conn.addWorker(h.name, h)
	m.workers[key] = h
	m.statusMu.Lock()
	m.status[key] = h.w
	m.statusMu.Unlock()
	go func() { defer close(h.done); h.w.Run(ctx) }()
}

// stopWorker stops a worker; release also removes its items from the
// gateway (not worth it when the connection goes anyway).
func (m *Manager) stopWorker(key string, release bool) {
	h := m.workers[key]
	h.cancel()
	<-h.done
	c := h.conn
	c.removeWorker(h.name)
	if h.alarm.Source != "" {
		c.removeAlarmSource(h.alarm.Source)
	}
	if remove := h.sub.release(); release && remove != nil {
		m.background.Add(1)
		go func() { defer m.background.Done(); remove() }()
	}
	delete(m.workers, key)
	m.statusMu.Lock()
	delete(m.status, key)
	m.statusMu.Unlock()
}

type target struct{ instance, attribute string }

// maxEarly bounds a connection's buffer of data changes without a route.
const maxEarly = 65536

// connection is the manager's side of one gateway connection: it routes
// data changes to the sink and connection signals to the workers.
type connection struct {
	cfg    ConnectionConfig
	conn   Conn
	co     *coalescer
	sink   Sink
	log    zerolog.Logger
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	routes map[int32]target
	// early keeps the newest data change of handles without a route yet:
	// an item's first value can overtake the subscribe result.
	early   map[int32]gateway.DataChange
	session uint64
	good    bool
	workers map[string]*workerHandle
	// alarms receives the alarm transitions of alarmSources, the sources
	// with a worker on this connection.
	alarms       AlarmSink
	alarmSources map[string]int
}

func (c *connection) addWorker(name string, h *workerHandle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.workers[name] = h
}

func (c *connection) removeWorker(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.workers, name)
}

func (c *connection) stop() {
	c.cancel()
	<-c.done
	if err := c.conn.Close(); err != nil {
		c.log.Debug().Err(err).Msg("close connection")
	}
}

// DataChange implements gateway.Handler.
func (c *connection) DataChange(d gateway.DataChange) {
	c.mu.Lock()
	t, ok := c.routes[d.Handle]
	if !ok && len(c.early) < maxEarly {
		c.early[d.Handle] = d
	}
	c.mu.Unlock()
	if ok {
		c.sink.TagUpdate(t.instance, t.attribute, d.Value, d.Quality, d.Timestamp)
	}
}

// ConnectionState implements gateway.Handler.
func (c *connection) ConnectionState(st gateway.State) {
	c.mu.Lock()
	// The first session replaces none: a subscribe that already went out
	// on it (the callback can trail the first command) must not be
	// invalidated and sent again.
	firstSession := st.Good && c.session == 0
	newSession := st.Good && st.Session != c.session && !firstSession
	wasGood := c.good
	c.good = st.Good
	if firstSession {
		c.session = st.Session
	}
	if newSession {
		c.session = st.Session
		c.routes = map[int32]target{}
		c.early = map[int32]gateway.DataChange{}
	}
	workers := make([]*workerHandle, 0, len(c.workers))
	for _, h := range c.workers {
		workers = append(workers, h)
	}
	c.mu.Unlock()
	switch {
	case !st.Good && wasGood:
		now := time.Now()
		for _, h := range workers {
			h.w.ConnectionLost()
			for _, a := range h.inst.Attributes {
				c.sink.TagUpdate(h.inst.Name, a.Name, nil, field.QualityBadCommFailure, now)
			}
		}
	case newSession:
		for _, h := range workers {
			h.sub.reset()
			h.w.Invalidate()
		}
	case st.Good && !wasGood:
		for _, h := range workers {
			h.w.ConnectionGood()
		}
	}
}

// tagSubscription subscribes one instance's tags on its connection. Each
// attempt asks only for the attributes not yet settled (advised, or
// rejected by the gateway as unknown).
type tagSubscription struct {
	conn *connection
	inst InstanceConfig
	// life ends when the worker is stopped (release).
	life    context.Context
	endLife context.CancelFunc

	mu      sync.Mutex
	gen     uint64
	handles map[string]int32
	settled map[string]bool
}

// Subscribe implements Subscription.
func (s *tagSubscription) Subscribe(ctx context.Context) error {
	s.mu.Lock()
	gen := s.gen
	var attrs []Attribute
	for _, a := range s.inst.Attributes {
		if !s.settled[a.Name] {
			attrs = append(attrs, a)
		}
	}
	s.mu.Unlock()
	if len(attrs) == 0 {
		return nil
	}
	tags := make([]string, len(attrs))
	for i, a := range attrs {
		tags[i] = a.Tag
	}
	_, err := s.conn.co.subscribe(ctx, s.life, tags, func(items []gateway.ItemResult) (bool, error) {
		return s.record(gen, attrs, items)
	})
	if err != nil {
		return fmt.Errorf("subscribe %d tags of %s: %w", len(tags), s.inst.Name, err)
	}
	return nil
}

// record applies the results of an attempt started at generation gen. It
// runs even if that attempt was superseded: advised items are real either
// way. Results from before a reset or release are not claimed.
func (s *tagSubscription) record(gen uint64, attrs []Attribute, items []gateway.ItemResult) (bool, error) {
	s.mu.Lock()
	if s.gen != gen {
		s.mu.Unlock()
		return false, errors.New("superseded by a reset meanwhile")
	}
	var transient int
	var firstErr error
	var early []gateway.DataChange
	now := time.Now()
	for i, it := range items {
		a := attrs[i]
		switch {
		case it.Err == nil:
			if old, ok := s.handles[a.Name]; ok && old != it.Handle {
				// Settled meanwhile by another attempt: keep one item.
				go s.conn.co.removeOrphans([]int32{it.Handle})
				continue
			}
			s.handles[a.Name] = it.Handle
			s.settled[a.Name] = true
			s.conn.mu.Lock()
			s.conn.routes[it.Handle] = target{s.inst.Name, a.Name}
			if d, ok := s.conn.early[it.Handle]; ok {
				delete(s.conn.early, it.Handle)
				early = append(early, d)
			}
			s.conn.mu.Unlock()
		case it.Transient:
			transient++
			if firstErr == nil {
				firstErr = it.Err
			}
		default:
			s.settled[a.Name] = true
			s.conn.log.Warn().Err(it.Err).Str("instance", s.inst.Name).Str("attribute", a.Name).Msg("tag rejected by the gateway")
			s.conn.sink.TagUpdate(s.inst.Name, a.Name, nil, field.QualityBadConfigError, now)
		}
	}
	s.mu.Unlock()
	for _, d := range early {
		s.conn.DataChange(d)
	}
	if transient > 0 {
		return true, fmt.Errorf("%d of %d tags not advised: %w", transient, len(items), firstErr)
	}
	return true, nil
}

// reset forgets everything: the session the handles lived on is gone.
func (s *tagSubscription) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.handles = map[string]int32{}
	s.settled = map[string]bool{}
}

// release drops the routes and returns the removal of the gateway items
// (nil when there are none) for the caller to run where it cannot block.
func (s *tagSubscription) release() func() {
	s.endLife()
	s.mu.Lock()
	s.gen++
	handles := make([]int32, 0, len(s.handles))
	for _, h := range s.handles {
		handles = append(handles, h)
	}
	s.handles = map[string]int32{}
	s.settled = map[string]bool{}
	s.mu.Unlock()
	s.conn.mu.Lock()
	for _, h := range handles {
		if t, ok := s.conn.routes[h]; ok && t.instance == s.inst.Name {
			delete(s.conn.routes, h)
		}
	}
	s.conn.mu.Unlock()
	if len(handles) == 0 {
		return nil
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.conn.conn.RemoveItems(ctx, handles); err != nil {
			s.conn.log.Debug().Err(err).Str("instance", s.inst.Name).Msg("remove items of a stopped worker")
		}
	}
}
