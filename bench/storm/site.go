package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/field"
	"github.com/scadad/scadad/gateway"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/subscribe"
)

// site is one way of keeping instances subscribed: legacy or scadad.
type site interface {
	deploy(instances []subscribe.InstanceConfig) error
	undeploy() error
	// ops is the client-level subscribe counter below the retry logic.
	ops() *opCounter
	close()
}

// opCounter counts subscribe calls on a connection: total, in flight, peak.
type opCounter struct {
	mu       sync.Mutex
	total    int
	inFlight int
	peak     int
}

func (o *opCounter) begin() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.total++
	o.inFlight++
	o.peak = max(o.peak, o.inFlight)
}

func (o *opCounter) end() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inFlight--
}

// reset zeroes the counters; the peak restarts from what is in flight now.
func (o *opCounter) reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.total = 0
	o.peak = o.inFlight
}

func (o *opCounter) snapshot() (total, peak int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.total, o.peak
}

// countingConn wraps the gateway client and counts subscribe calls.
type countingConn struct {
	*gateway.Client
	counter *opCounter
}

func (c countingConn) SubscribeTags(ctx context.Context, tags []string) ([]gateway.ItemResult, error) {
	c.counter.begin()
	defer c.counter.end()
	return c.Client.SubscribeTags(ctx, tags)
}

// sink remembers the newest quality per attribute.
type sink struct {
	mu sync.Mutex
	q  map[string]field.Quality
}

func newSink() *sink { return &sink{q: map[string]field.Quality{}} }

func (s *sink) TagUpdate(instance, attribute string, _ field.Value, q field.Quality, _ time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.q[instance+"/"+attribute] = q
}

func (s *sink) allGood(instances []subscribe.InstanceConfig) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, in := range instances {
		for _, a := range in.Attributes {
			if q, ok := s.q[in.Name+"/"+a.Name]; !ok || !q.IsGood() {
				return false
			}
		}
	}
	return true
}

// forget drops what is known about the instances, so only values that
// arrive from now on count.
func (s *sink) forget(instances []subscribe.InstanceConfig) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, in := range instances {
		for _, a := range in.Attributes {
			delete(s.q, in.Name+"/"+a.Name)
		}
	}
}

func (s *sink) markAll(instances []subscribe.InstanceConfig, q field.Quality) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, in := range instances {
		for _, a := range in.Attributes {
			s.q[in.Name+"/"+a.Name] = q
		}
	}
}

// --- scadad ---

type scadadSite struct {
	m       *subscribe.Manager
	conn    subscribe.ConnectionConfig
	counter *opCounter
	cancel  context.CancelFunc
	done    chan struct{}
}

type countingDialer struct {
	counter *opCounter
	log     zerolog.Logger
	probe   time.Duration
}

func (d countingDialer) Dial(cfg subscribe.ConnectionConfig, events gateway.Handler) (subscribe.Conn, error) {
	c, err := gateway.New(gateway.Config{Name: cfg.Name, Endpoint: cfg.Endpoint,
		CommandTimeout: cfg.Options.CommandTimeout, ProbeInterval: cfg.Options.ProbeInterval,
		ProbeTimeout: cfg.Options.ProbeTimeout, ReconnectFloor: d.probe / 10, Handler: events, Logger: d.log})
	if err != nil {
		return nil, err
	}
	return countingConn{Client: c, counter: d.counter}, nil
}

func newScadadSite(p params, endpoint string, s *sink, log zerolog.Logger) (*scadadSite, error) {
	counter := &opCounter{}
	rb := role.NewBroadcaster(role.State{Role: role.Active, Epoch: role.Epoch{Cluster: 1, Term: 1}})
	m, err := subscribe.NewManager(subscribe.Options{
		Role: rb, Sink: s, Dialer: countingDialer{counter: counter, log: log, probe: p.d(5 * time.Second)},
		Policy: subscribe.RetryPolicy{Floor: p.d(5 * time.Second), Max: p.d(60 * time.Second), InFlightCeiling: p.d(45 * time.Second)},
		Logger: log,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	site := &scadadSite{m: m, counter: counter, cancel: cancel, done: make(chan struct{}),
		conn: subscribe.ConnectionConfig{Name: "mx1", Endpoint: endpoint, Options: subscribe.ConnectionOptions{
			CommandTimeout: p.d(60 * time.Second), ProbeInterval: p.d(5 * time.Second), ProbeTimeout: p.d(5 * time.Second)}}}
	go func() { defer close(site.done); _ = m.Run(ctx) }()
	if err := m.Apply(subscribe.Config{Connections: []subscribe.ConnectionConfig{site.conn}}); err != nil {
		return nil, err
	}
	return site, nil
}

func (s *scadadSite) apply(instances []subscribe.InstanceConfig) error {
	if err := s.m.Apply(subscribe.Config{Connections: []subscribe.ConnectionConfig{s.conn}, Instances: instances}); err != nil {
		return err
	}
	if !until(10*time.Second, func() bool { return len(s.m.Status()) == len(instances) }) {
		return fmt.Errorf("workers did not reach %d", len(instances))
	}
	return nil
}

func (s *scadadSite) deploy(instances []subscribe.InstanceConfig) error { return s.apply(instances) }
func (s *scadadSite) undeploy() error                                   { return s.apply(nil) }
func (s *scadadSite) ops() *opCounter                                   { return s.counter }
func (s *scadadSite) close()                                            { s.cancel(); <-s.done }

// --- legacy ---

// legacySite is the pre-Lever-1 InstanceActor over the pre-Lever-2 DCL: a
// subscribe is re-sent every fixed interval, armed on send, until one
// succeeds; nothing checks whether one is already outstanding. Outstanding
// subscribes of a stopped instance keep running, as they did in the DCL.
type legacySite struct {
	client  countingConn
	sink    *sink
	retry   time.Duration
	cancel  context.CancelFunc
	done    chan struct{}
	log     zerolog.Logger
	router  *legacyRouter
	mu      sync.Mutex
	running []context.CancelFunc
	wg      sync.WaitGroup
}

type legacyRouter struct {
	sink     *sink
	mu       sync.Mutex
	routes   map[int32]string
	deployed []subscribe.InstanceConfig
}

func (r *legacyRouter) DataChange(d gateway.DataChange) {
	r.mu.Lock()
	key, ok := r.routes[d.Handle]
	r.mu.Unlock()
	if ok {
		r.sink.mu.Lock()
		r.sink.q[key] = d.Quality
		r.sink.mu.Unlock()
	}
}

func (r *legacyRouter) ConnectionState(st gateway.State) {
	if st.Good {
		return
	}
	r.mu.Lock()
	deployed := r.deployed
	r.mu.Unlock()
	r.sink.markAll(deployed, field.QualityBadCommFailure)
}

func newLegacySite(p params, endpoint string, s *sink, log zerolog.Logger) (*legacySite, error) {
	router := &legacyRouter{sink: s, routes: map[int32]string{}}
	c, err := gateway.New(gateway.Config{Name: "mx1", Endpoint: endpoint, CommandTimeout: -1,
		ProbeInterval: p.d(5 * time.Second), ProbeTimeout: p.d(5 * time.Second), ReconnectFloor: p.d(500 * time.Millisecond),
		Handler: router, Logger: log})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &legacySite{client: countingConn{Client: c, counter: &opCounter{}}, sink: s, retry: p.d(5 * time.Second),
		cancel: cancel, done: make(chan struct{}), log: log, router: router}
	go func() { defer close(l.done); _ = c.Run(ctx) }()
	until(10*time.Second, func() bool { return c.State().Good })
	return l, nil
}

func (l *legacySite) deploy(instances []subscribe.InstanceConfig) error {
	l.router.mu.Lock()
	l.router.deployed = instances
	l.router.mu.Unlock()
	for _, in := range instances {
		ctx, cancel := context.WithCancel(context.Background())
		l.mu.Lock()
		l.running = append(l.running, cancel)
		l.mu.Unlock()
		l.wg.Add(1)
		go func() { defer l.wg.Done(); l.instanceActor(ctx, in) }()
	}
	return nil
}

// instanceActor re-sends the full subscribe every l.retry until one succeeds.
func (l *legacySite) instanceActor(ctx context.Context, in subscribe.InstanceConfig) {
	tags := make([]string, len(in.Attributes))
	for i, a := range in.Attributes {
		tags[i] = a.Tag
	}
	success := make(chan struct{}, 1)
	send := func() {
		go func() {
			// The DCL's subscribe is not cancelled when the actor stops.
			items, err := l.client.SubscribeTags(context.Background(), tags)
			if err != nil {
				return
			}
			ok := true
			l.router.mu.Lock()
			for i, it := range items {
				if it.Err != nil {
					ok = false
					continue
				}
				l.router.routes[it.Handle] = in.Name + "/" + in.Attributes[i].Name
			}
			l.router.mu.Unlock()
			if ok {
				select {
				case success <- struct{}{}:
				default:
				}
			}
		}()
	}
	send()
	t := time.NewTicker(l.retry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-success:
			return
		case <-t.C:
			send()
		}
	}
}

func (l *legacySite) undeploy() error {
	l.mu.Lock()
	for _, cancel := range l.running {
		cancel()
	}
	l.running = nil
	l.mu.Unlock()
	l.wg.Wait()
	// The stopped actors no longer receive values; a new actor gets values
	// only for the items its own subscribes establish.
	l.router.mu.Lock()
	l.router.routes = map[int32]string{}
	l.router.deployed = nil
	l.router.mu.Unlock()
	return nil
}

func (l *legacySite) ops() *opCounter { return l.client.counter }

func (l *legacySite) close() {
	_ = l.undeploy()
	l.cancel()
	<-l.done
	_ = l.client.Close()
}

// until polls cond every millisecond until it holds or d passes.
func until(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}
