package uaclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/field"
	"github.com/scadad/scadad/internal/backoff"
	"github.com/scadad/scadad/internal/clock"
	"github.com/scadad/scadad/internal/numeric"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/uasec"
)

// Sink receives every value read upstream with its StatusCode, whole (an
// UncertainLastUsableValue stays that, not plain Uncertain); a lost
// session reports its attributes BadNotConnected and no value.
type Sink interface {
	TagStatus(instance, attribute string, v field.Value, status ua.StatusCode, ts time.Time)
}

// RoleSource is the part of the role stream the manager follows;
// *role.Broadcaster implements it.
type RoleSource interface {
	Watch() (<-chan role.State, func())
}

// Options configure a Manager.
type Options struct {
	Role   RoleSource // required
	Sink   Sink       // required
	Logger zerolog.Logger
	Clock  clock.Clock    // drives the reconnect backoff; default: the wall clock
	Rand   func() float64 // backoff jitter in [0,1); default math/rand
	// Registerer receives the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// InitialValuesWait is the least time a new subscription is given to
	// deliver its first notification before it is opened again (at least
	// three of its publishing intervals); default 5 s.
	InitialValuesWait time.Duration
}

// Manager keeps the configured upstream sessions open while the role
// allows and forwards writes to them.
type Manager struct {
	opts    Options
	log     zerolog.Logger
	kick    chan struct{}
	metrics *metrics

	mu       sync.Mutex
	desired  Config
	sessions map[string]*session // running; owned by Run, read by Write and Status
}

// NewManager checks opts and returns a manager; Run starts it.
func NewManager(opts Options) (*Manager, error) {
	if opts.Role == nil || opts.Sink == nil {
		return nil, errors.New("opc ua client manager: Role and Sink are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.System()
	}
	if opts.InitialValuesWait <= 0 {
		opts.InitialValuesWait = defaultInitialValuesWait
	}
	if opts.Rand == nil {
		opts.Rand = rand.Float64
	}
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	met, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Manager{opts: opts, log: opts.Logger, kick: make(chan struct{}, 1), metrics: met, sessions: map[string]*session{}}, nil
}

// Apply makes cfg the desired configuration; connections that did not
// change keep their sessions.
func (m *Manager) Apply(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("apply opc ua client config: %w", err)
	}
	m.mu.Lock()
	m.desired = cfg
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
	return nil
}

// Run follows the role until ctx ends, then closes every session.
func (m *Manager) Run(ctx context.Context) error {
	roles, stop := m.opts.Role.Watch()
	defer stop()
	var last role.State
	allowed := false
	for {
		select {
		case <-ctx.Done():
			m.reconcile(Config{})
			return nil
		case last = <-roles:
		case <-m.kick:
		}
		m.mu.Lock()
		want := m.desired
		m.mu.Unlock()
		was := allowed
		allowed = last.Role.ReadsField(want.HotStandby)
		if was != allowed && len(want.Connections) > 0 {
			m.log.Info().Str("role", last.Role.String()).Bool("hot_standby", want.HotStandby).Bool("sessions", allowed).Msg("opc ua client sessions follow the role")
		}
		if !allowed {
			want = Config{}
		}
		m.reconcile(want)
	}
}

// reconcile closes the sessions that go or change and opens the new ones.
func (m *Manager) reconcile(want Config) {
	wanted := map[string]Connection{}
	for _, c := range want.Connections {
		wanted[c.Name] = c
	}
	m.mu.Lock()
	var stopping []*session
	for name, s := range m.sessions {
		if c, ok := wanted[name]; !ok || !c.equal(s.cfg) {
			stopping = append(stopping, s)
			delete(m.sessions, name)
		}
	}
	var starting []*session
	for name, c := range wanted {
		if _, ok := m.sessions[name]; !ok {
			s := newSession(c, m.opts, m.metrics, m.log.With().Str("connection", name).Logger())
			m.sessions[name] = s
			starting = append(starting, s)
		}
	}
	m.mu.Unlock()
	for _, s := range stopping {
		s.stop()
		m.metrics.connected.DeleteLabelValues(s.cfg.Name)
	}
	for _, s := range starting {
		s.start()
	}
}

// Carries reports whether instance.attribute is read from an OPC UA
// client connection in the desired configuration, running or not.
func (m *Manager) Carries(instance, attribute string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.desired.Connections {
		for _, it := range c.Items {
			if it.Instance == instance && it.Attribute == attribute {
				return true
			}
		}
	}
	return false
}

// Write forwards an allowed device write to the upstream node carrying
// instance.attribute. It fails when the attribute is not on a client
// connection, its session is not open, or the server refuses the write.
func (m *Manager) Write(ctx context.Context, instance, attribute string, value any) error {
	m.mu.Lock()
	var s *session
	item := -1
	for _, c := range m.sessions {
		for i, it := range c.cfg.Items {
			if it.Instance == instance && it.Attribute == attribute {
				s, item = c, i
			}
		}
	}
	m.mu.Unlock()
	if s == nil {
		return fmt.Errorf("write %s.%s: not read from a running OPC UA client connection on this node", instance, attribute)
	}
	return s.write(ctx, item, value)
}

// ConnectionStatus is a snapshot of one session for status pages and tests.
type ConnectionStatus struct {
	Name      string
	Endpoint  string
	Connected bool
	Items     int
	LastError string
}

// Status lists the running connections by name.
func (m *Manager) Status() []ConnectionStatus {
	m.mu.Lock()
	out := make([]ConnectionStatus, 0, len(m.sessions))
	for _, s := range m.sessions {
		out = append(out, s.status())
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// session keeps one connection's client session and subscription open.
type session struct {
	cfg     Connection
	opts    Options
	metrics *metrics
	log     zerolog.Logger
	cancel  context.CancelFunc
	done    chan struct{}

	mu      sync.Mutex
	client  *gopcua.Client     // nil while not subscribed
	nodes   map[int]*ua.NodeID // item index → resolved node, while subscribed
	lastErr string

	stateReads atomic.Int64 // successful watchdog reads, for tests
}

func newSession(c Connection, opts Options, met *metrics, log zerolog.Logger) *session {
	return &session{cfg: c, opts: opts, metrics: met, log: log, done: make(chan struct{})}
}

func (s *session) start() {
	// Present from the start, so a connection that never comes up reads 0
	// (and can be alerted on) rather than being absent.
	s.metrics.connected.WithLabelValues(s.cfg.Name).Set(0)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		defer close(s.done)
		s.run(ctx)
	}()
}

// stop closes the session and waits for it; its values are no longer live.
func (s *session) stop() {
	s.cancel()
	<-s.done
}

func (s *session) status() ConnectionStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ConnectionStatus{Name: s.cfg.Name, Endpoint: s.cfg.Endpoint, Connected: s.client != nil, Items: len(s.cfg.Items), LastError: s.lastErr}
}

// run opens the session again and again until ctx ends, backing off after
// each failure; a session that got as far as subscribing resets the
// backoff.
func (s *session) run(ctx context.Context) {
	failures := 0
	for {
		subscribed, err := s.once(ctx)
		if ctx.Err() != nil {
			s.markAll(ua.StatusBadNotConnected)
			return
		}
		if errors.Is(err, errSilentSubscription) {
			// The values read when subscribing stand (they are the
			// latest known); subscribe again at once.
			s.log.Warn().Err(err).Str("endpoint", s.cfg.Endpoint).Msg("opc ua client subscription delivered nothing; subscribing again")
			continue
		}
		s.markAll(ua.StatusBadNotConnected)
		if subscribed {
			failures = 0
		}
		failures++
		s.metrics.lost.WithLabelValues(s.cfg.Name).Inc()
		wait := backoff.Delay(s.cfg.BackoffFloor, s.cfg.BackoffMax, failures, s.opts.Rand())
		s.mu.Lock()
		s.lastErr = err.Error()
		s.mu.Unlock()
		s.log.Warn().Err(err).Str("endpoint", s.cfg.Endpoint).Dur("retry_in", wait).Msg("opc ua client session lost; attributes Bad until it is back")
		select {
		case <-ctx.Done():
			return
		case <-s.opts.Clock.After(wait):
		}
	}
}

func (s *session) markAll(status ua.StatusCode) {
	now := s.opts.Clock.Now()
	for _, it := range s.cfg.Items {
		s.opts.Sink.TagStatus(it.Instance, it.Attribute, nil, status, now)
	}
}

// keepAlive is how often the server is asked for its state and how often
// it is asked to answer a publish even with no change.
const keepAlive = 2 * time.Second

// errSilentSubscription: a new subscription delivered no notification.
var errSilentSubscription = errors.New("subscription delivered no notification")

// defaultInitialValuesWait is Options.InitialValuesWait's default.
const defaultInitialValuesWait = 5 * time.Second

// watchdog reads the server's state every keepAlive and reports the first
// failure (no answer within the request timeout, or a state other than
// Running) on dead.
func (s *session) watchdog(ctx context.Context, c *gopcua.Client, dead chan<- error) {
	state := &ua.ReadValueID{NodeID: ua.NewNumericNodeID(0, id.Server_ServerStatus_State), AttributeID: ua.AttributeIDValue}
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.opts.Clock.After(keepAlive):
		}
		rctx, cancel := context.WithTimeout(ctx, s.cfg.Client.Timeout)
		resp, err := c.Read(rctx, &ua.ReadRequest{NodesToRead: []*ua.ReadValueID{state}})
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			err = fmt.Errorf("server state of %s: %w", s.cfg.Endpoint, err)
		case len(resp.Results) != 1 || resp.Results[0].Status != ua.StatusOK || resp.Results[0].Value == nil:
			err = fmt.Errorf("server state of %s unreadable", s.cfg.Endpoint)
		default:
			if v, ok := resp.Results[0].Value.Value().(int32); ok && v != int32(ua.ServerStateRunning) {
				err = fmt.Errorf("server %s is in state %d, not Running", s.cfg.Endpoint, v)
			}
		}
		if err != nil {
			dead <- err
			return
		}
		s.stateReads.Add(1)
	}
}

// once opens one session, subscribes every item and relays notifications
// until the session fails or ctx ends. subscribed reports whether it got
// as far as a working subscription.
func (s *session) once(ctx context.Context) (subscribed bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	states := make(chan gopcua.ConnState, 8)
	c, err := uasec.Dial(ctx, s.cfg.Endpoint, s.cfg.Client, gopcua.StateChangedCh(states))
	if err != nil {
		return false, err
	}
	defer s.cfg.Client.Close(c)

	interval := s.cfg.PublishingInterval
	keepAliveCount := uint32(max(1, keepAlive/interval))
	notes := make(chan *gopcua.PublishNotificationData, 64)
	sub, err := c.Subscribe(ctx, &gopcua.SubscriptionParameters{Interval: interval, MaxKeepAliveCount: keepAliveCount, LifetimeCount: 3 * keepAliveCount}, notes)
	if err != nil {
		return false, fmt.Errorf("subscribe on %s: %w", s.cfg.Endpoint, err)
	}
	defer s.cfg.Client.Cancel(sub) // deleted, not left to time out on the server
	// Items named by namespace URI need the server's NamespaceArray; an
	// item that does not resolve stays Bad and the others go on.
	var namespaces []string
	for _, it := range s.cfg.Items {
		if strings.HasPrefix(it.NodeID, "nsu=") {
			if namespaces, err = c.NamespaceArray(ctx); err != nil {
				return false, fmt.Errorf("read the namespace array of %s: %w", s.cfg.Endpoint, err)
			}
			break
		}
	}
	resolved := map[int]*ua.NodeID{}
	var reqs []*ua.MonitoredItemCreateRequest
	var nodes []*ua.ReadValueID
	var monitored []int // item index of each request
	for i, it := range s.cfg.Items {
		nid, err := resolveNodeID(it.NodeID, namespaces)
		if err != nil {
			s.refused(it, err.Error())
			continue
		}
		resolved[i] = nid
		reqs = append(reqs, gopcua.NewMonitoredItemCreateRequestWithDefaults(nid, ua.AttributeIDValue, uint32(i+1)))
		nodes = append(nodes, &ua.ReadValueID{NodeID: nid, AttributeID: ua.AttributeIDValue})
		monitored = append(monitored, i)
	}
	if len(reqs) == 0 {
		return false, fmt.Errorf("none of the %d items on %s resolves to a node", len(s.cfg.Items), s.cfg.Endpoint)
	}
	res, err := sub.Monitor(ctx, ua.TimestampsToReturnBoth, reqs...)
	if err != nil {
		return false, fmt.Errorf("monitor %d items on %s: %w", len(reqs), s.cfg.Endpoint, err)
	}
	if len(res.Results) != len(reqs) {
		return false, fmt.Errorf("monitor %d items on %s: %d results", len(reqs), s.cfg.Endpoint, len(res.Results))
	}
	accepted := 0
	for k, r := range res.Results {
		if r.StatusCode != ua.StatusOK {
			s.refused(s.cfg.Items[monitored[k]], r.StatusCode.Error())
			continue
		}
		accepted++
	}
	s.mu.Lock()
	s.client, s.nodes = c, resolved
	s.lastErr = ""
	s.mu.Unlock()
	s.metrics.connected.WithLabelValues(s.cfg.Name).Set(1)
	defer func() {
		s.mu.Lock()
		s.client, s.nodes = nil, nil
		s.mu.Unlock()
		s.metrics.connected.WithLabelValues(s.cfg.Name).Set(0)
	}()
	s.log.Info().Str("endpoint", s.cfg.Endpoint).Int("items", len(reqs)).Msg("opc ua client session subscribed")

	// A new subscription's first notification carries every current
	// value, but gopcua v0.8.0 has been seen to lose it under load
	// (opcua/server_test.go): read them once as well. A notification
	// older than what was already relayed is dropped.
	latest := make([]time.Time, len(s.cfg.Items))
	rr, err := c.Read(ctx, &ua.ReadRequest{NodesToRead: nodes, TimestampsToReturn: ua.TimestampsToReturnBoth})
	if err != nil {
		return true, fmt.Errorf("read initial values on %s: %w", s.cfg.Endpoint, err)
	}
	for k, dv := range rr.Results {
		if k < len(monitored) && res.Results[k].StatusCode == ua.StatusOK {
			s.relay(monitored[k], dv, latest)
		}
	}

	// gopcua swallows the server's keep-alives, so a quiet subscription
	// says nothing about the session: read the server's state instead.
	dead := make(chan error, 1)
	go s.watchdog(ctx, c, dead)
	// The first data change (every accepted item's current value) comes
	// within a publishing interval or so. None at all means nothing is
	// being published to us: gopcua v0.8.0's client can leave its publish
	// loop paused for good when Subscribe races the loop's start
	// (opcua/WORKAROUNDS.md), and the values read above would then stand
	// as Good for ever while the source moves on. Subscribe again.
	var firstNote <-chan time.Time
	wait := max(s.opts.InitialValuesWait, 3*sub.RevisedPublishingInterval)
	if accepted > 0 {
		firstNote = s.opts.Clock.After(wait)
	}
	for {
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-firstNote:
			s.metrics.resubscribed.WithLabelValues(s.cfg.Name).Inc()
			return true, fmt.Errorf("%w: none from %s within %v of subscribing %d items", errSilentSubscription, s.cfg.Endpoint, wait, accepted)
		case st := <-states:
			if st == gopcua.Closed || st == gopcua.Disconnected {
				return true, fmt.Errorf("session to %s %v", s.cfg.Endpoint, st)
			}
		case err := <-dead:
			return true, err
		case n := <-notes:
			if n.Error != nil {
				return true, fmt.Errorf("subscription on %s: %w", s.cfg.Endpoint, n.Error)
			}
			dcn, ok := n.Value.(*ua.DataChangeNotification)
			if !ok {
				continue
			}
			firstNote = nil
			for _, item := range dcn.MonitoredItems {
				if item != nil && item.ClientHandle >= 1 && int(item.ClientHandle) <= len(latest) {
					s.relay(int(item.ClientHandle)-1, item.Value, latest)
				}
			}
		}
	}
}

// refused reports an item the upstream cannot serve: it stays Bad.
func (s *session) refused(it Item, why string) {
	s.log.Error().Str("instance", it.Instance).Str("attribute", it.Attribute).Str("node_id", it.NodeID).Str("reason", why).Msg("upstream cannot serve the attribute's node; it stays Bad")
	s.opts.Sink.TagStatus(it.Instance, it.Attribute, nil, ua.StatusBadConfigurationError, s.opts.Clock.Now())
}

// relay hands item i's data value to the sink unless it is older than the
// last one relayed.
func (s *session) relay(i int, dv *ua.DataValue, latest []time.Time) {
	if dv == nil {
		return
	}
	ts := dv.SourceTimestamp
	if ts.IsZero() {
		ts = dv.ServerTimestamp
	}
	if ts.IsZero() {
		ts = s.opts.Clock.Now()
	}
	if ts.Before(latest[i]) {
		return
	}
	latest[i] = ts
	it := s.cfg.Items[i]
	status := dv.Status
	var v field.Value
	if dv.Value != nil {
		var ok bool
		if v, ok = plainValue(dv.Value.Value()); !ok {
			s.log.Warn().Str("instance", it.Instance).Str("attribute", it.Attribute).Str("type", fmt.Sprintf("%T", dv.Value.Value())).Msg("upstream value of a type the site has no attribute type for; reported Bad")
			v, status = nil, ua.StatusBadTypeMismatch
		}
	}
	s.opts.Sink.TagStatus(it.Instance, it.Attribute, v, status, ts)
}

// write sends one value to item's upstream node.
func (s *session) write(ctx context.Context, item int, value any) error {
	it := s.cfg.Items[item]
	s.mu.Lock()
	c, nid := s.client, s.nodes[item]
	s.mu.Unlock()
	if c == nil {
		return fmt.Errorf("write %s.%s: connection %q to %s is not connected", it.Instance, it.Attribute, s.cfg.Name, s.cfg.Endpoint)
	}
	if nid == nil {
		return fmt.Errorf("write %s.%s: node %s does not resolve on %s", it.Instance, it.Attribute, it.NodeID, s.cfg.Endpoint)
	}
	variant, err := ua.NewVariant(value)
	if err != nil {
		return fmt.Errorf("write %s.%s: value %v (%T): %w", it.Instance, it.Attribute, value, value, err)
	}
	resp, err := c.Write(ctx, &ua.WriteRequest{NodesToWrite: []*ua.WriteValue{{
		NodeID: nid, AttributeID: ua.AttributeIDValue,
		Value: &ua.DataValue{EncodingMask: ua.DataValueValue, Value: variant},
	}}})
	if err != nil {
		return fmt.Errorf("write %s.%s to %s on %s: %w", it.Instance, it.Attribute, it.NodeID, s.cfg.Endpoint, err)
	}
	if len(resp.Results) != 1 || resp.Results[0] != ua.StatusOK {
		return fmt.Errorf("write %s.%s to %s on %s: refused: %v", it.Instance, it.Attribute, it.NodeID, s.cfg.Endpoint, resp.Results)
	}
	return nil
}

// plainValue narrows an OPC UA scalar to the daemon's value types (nil,
// float64, int64, bool, string); other types (arrays, dates, byte
// strings) have no site attribute type.
func plainValue(v any) (field.Value, bool) {
	switch x := v.(type) {
	case nil:
		return nil, true
	case bool, string, float64:
		return x, true
	case float32:
		return float64(x), true
	}
	// Integer kinds, within int64's range (floats were taken above).
	i, ok := numeric.Int(v)
	if !ok {
		return nil, false
	}
	return i, true
}
