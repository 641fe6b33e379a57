package subscribe

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/field"
	"github.com/scadad/scadad/gateway"
	"github.com/scadad/scadad/gateway/sim"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/role"
)

// memSink keeps the newest update per (instance, attribute).
type memSink struct {
	mu   sync.Mutex
	last map[string]update
}

type update struct {
	v  field.Value
	q  field.Quality
	ts time.Time
}

func newMemSink() *memSink { return &memSink{last: map[string]update{}} }

func (s *memSink) TagUpdate(instance, attribute string, v field.Value, q field.Quality, ts time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last[instance+"/"+attribute] = update{v, q, ts}
}

func (s *memSink) quality(key string) (field.Quality, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.last[key]
	return u.q, ok
}

// allGood reports whether every attribute of cfg's instances has a good value.
func (s *memSink) allGood(cfg Config) bool {
	for _, in := range cfg.Instances {
		for _, a := range in.Attributes {
			if q, ok := s.quality(in.Name + "/" + a.Name); !ok || !q.IsGood() {
				return false
			}
		}
	}
	return true
}

func siteConfig(endpoint string, instances, attrs int) Config {
	cfg := Config{Connections: []ConnectionConfig{{Name: "mx1", Endpoint: endpoint,
		Options: ConnectionOptions{ProbeInterval: -1}}}}
	for i := range instances {
		in := InstanceConfig{Name: fmt.Sprintf("Z2806%d", i+1), Connection: "mx1"}
		for j := range attrs {
			in.Attributes = append(in.Attributes, Attribute{Name: fmt.Sprintf("A%03d", j), Tag: fmt.Sprintf("%s.A%03d", in.Name, j)})
		}
		cfg.Instances = append(cfg.Instances, in)
	}
	return cfg
}

type managerRig struct {
	sim   *sim.Sim
	roles *role.Broadcaster
	sink  *memSink
	m     *Manager
	cfg   Config
}

func startManager(t *testing.T, scfg sim.Config, hot bool, instances, attrs int) *managerRig {
	t.Helper()
	s := sim.New(scfg)
	addr, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	r := &managerRig{sim: s, roles: role.NewBroadcaster(role.State{Role: role.Detached}), sink: newMemSink()}
	r.cfg = siteConfig(addr, instances, attrs)
	r.m = runManager(t, Options{Role: r.roles, HotStandby: hot, Sink: r.sink,
		Policy: RetryPolicy{Floor: 50 * time.Millisecond, Max: 400 * time.Millisecond, InFlightCeiling: 2 * time.Second}}, r.cfg)
	return r
}

// runManager starts a manager with opts (metrics to a fresh registry, no
// log) on cfg and stops it when the test ends.
func runManager(t testing.TB, opts Options, cfg Config) *Manager {
	t.Helper()
	opts.Registerer, opts.Logger = prometheus.NewRegistry(), zerolog.Nop()
	m, err := NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m
}

func TestManagerRunsOnlyWhileActive(t *testing.T) {
	r := startManager(t, sim.Config{}, false, 2, 10)
	if r.sim.Stats().Sessions != 0 {
		t.Fatal("a detached node opened a gateway session")
	}
	r.roles.Publish(role.State{Role: role.Active, Epoch: role.Epoch{Cluster: 1, Term: 2}})
	testwait.For(t, 10*time.Second, "all tags good", func() bool { return r.sink.allGood(r.cfg) })
	// Values can arrive before the worker has taken the reply in.
	testwait.For(t, 10*time.Second, "every worker confirmed", func() bool {
		ws := r.m.Status()
		for _, w := range ws {
			if !w.Confirmed {
				return false
			}
		}
		return len(ws) == 2
	})

	st := r.sim.Stats()
	if n := st.Commands[gateway.KindSubscribeBulk]; n < 1 || n > 2 {
		t.Errorf("SubscribeBulk commands = %d, want 1 or 2 (one per instance, or coalesced)", n)
	}
	if st.PeakSubscribeInFlight != 1 {
		t.Errorf("peak subscribe commands in flight = %d, want 1", st.PeakSubscribeInFlight)
	}
	r.roles.Publish(role.State{Role: role.Standby})
	testwait.For(t, 10*time.Second, "workers stop and the session closes", func() bool {
		return len(r.m.Status()) == 0 && r.sim.Stats().Sessions == 0
	})

	testwait.For(t, 10*time.Second, "values marked not live after losing the role", func() bool {
		q, _ := r.sink.quality("Z28061/A000")
		return q == field.QualityBadNotConnected
	})

}

func TestManagerHotStandbyRunsOnStandby(t *testing.T) {
	r := startManager(t, sim.Config{}, true, 1, 3)
	r.roles.Publish(role.State{Role: role.Standby})
	testwait.For(t, 10*time.Second, "all tags good on the hot standby", func() bool { return r.sink.allGood(r.cfg) })
	r.roles.Publish(role.State{Role: role.Witness})
	testwait.For(t, 10*time.Second, "workers stop on a witness", func() bool { return len(r.m.Status()) == 0 })
}

func TestManagerAppliesByDifference(t *testing.T) {
	r := startManager(t, sim.Config{}, false, 3, 4)
	r.roles.Publish(role.State{Role: role.Active})
	testwait.For(t, 10*time.Second, "all tags good", func() bool { return r.sink.allGood(r.cfg) })
	before := map[string]*Worker{}
	r.m.statusMu.Lock()
	for k, w := range r.m.status {
		before[k] = w
	}
	r.m.statusMu.Unlock()

	next := r.cfg.clone()
	next.Instances[1].Attributes = append(next.Instances[1].Attributes, Attribute{Name: "New", Tag: "Z28062.New"})
	next.Instances = next.Instances[:2] // drop Z28063
	if err := r.m.Apply(next); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "reconfigured", func() bool {
		st := r.m.Status()
		return len(st) == 2 && r.sink.allGood(next)
	})

	r.m.statusMu.Lock()
	defer r.m.statusMu.Unlock()
	key := func(name string) string { return InstanceConfig{Name: name, Connection: "mx1"}.key() }
	if w := r.m.status[key("Z28061")]; w == nil || w != before[key("Z28061")] {
		t.Error("unchanged instance Z28061 was restarted")
	}
	if w := r.m.status[key("Z28062")]; w == nil || w == before[key("Z28062")] {
		t.Error("changed instance Z28062 kept its old worker")
	}
	testwait.For(t, 10*time.Second, "removed instance's items gone from the gateway", func() bool {
		return r.sim.Stats().AdvisedItems == 4+5
	})

}

func TestManagerPartialSuccessKeepsGoodTags(t *testing.T) {
	r := startManager(t, sim.Config{BadTagPrefix: "Z28061.A001"}, false, 1, 3)
	r.roles.Publish(role.State{Role: role.Active})
	testwait.For(t, 10*time.Second, "good tags good", func() bool {
		a, _ := r.sink.quality("Z28061/A000")
		c, _ := r.sink.quality("Z28061/A002")
		return a.IsGood() && c.IsGood()
	})

	testwait.For(t, 10*time.Second, "bad tag reported", func() bool {
		q, ok := r.sink.quality("Z28061/A001")
		return ok && q == field.QualityBadConfigError
	})

	testwait.For(t, 10*time.Second, "confirmed", func() bool { st := r.m.Status(); return len(st) == 1 && st[0].Confirmed })
	if st := r.m.Status(); st[0].Endpoint != r.cfg.Connections[0].Endpoint {
		t.Errorf("status endpoint = %q, want the connection's %q", st[0].Endpoint, r.cfg.Connections[0].Endpoint)
	}
	if n := r.sim.Stats().Commands[gateway.KindSubscribeBulk]; n != 1 {
		t.Errorf("SubscribeBulk = %d, want 1 (a rejected tag is not retried)", n)
	}
}

func TestManagerResubscribesAfterGatewayRestart(t *testing.T) {
	r := startManager(t, sim.Config{ChangeInterval: 10 * time.Millisecond}, false, 2, 5)
	r.roles.Publish(role.State{Role: role.Active})
	testwait.For(t, 10*time.Second, "all tags good", func() bool { return r.sink.allGood(r.cfg) })
	r.sim.Restart()
	testwait.For(t, 10*time.Second, "new session", func() bool { return r.sim.Stats().SessionsOpened == 2 })
	testwait.For(t, 10*time.Second, "items advised on the new session", func() bool { return r.sim.Stats().AdvisedItems == 10 })
	mark := time.Now()
	testwait.For(t, 10*time.Second, "fresh values after restart", func() bool {
		r.sink.mu.Lock()
		defer r.sink.mu.Unlock()
		for _, u := range r.sink.last {
			if !u.q.IsGood() || u.ts.Before(mark) {
				return false
			}
		}
		return len(r.sink.last) == 10
	})

}

// blockingConn is a TagConn whose calls the test releases.
type blockingConn struct {
	mu       sync.Mutex
	calls    [][]string
	inFlight int
	peak     int
	removed  []int32
	release  chan struct{}
}

func (b *blockingConn) SubscribeTags(ctx context.Context, tags []string) ([]gateway.ItemResult, error) {
	b.mu.Lock()
	b.calls = append(b.calls, tags)
	b.inFlight++
	b.peak = max(b.peak, b.inFlight)
	b.mu.Unlock()
	defer func() { b.mu.Lock(); b.inFlight--; b.mu.Unlock() }()
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := make([]gateway.ItemResult, len(tags))
	for i, tag := range tags {
		out[i] = gateway.ItemResult{Tag: tag, Handle: int32(i + 1)}
	}
	return out, nil
}

func (b *blockingConn) RemoveItems(_ context.Context, h []int32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.removed = append(b.removed, h...)
	return nil
}

func (b *blockingConn) nCalls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.calls)
}

func TestCoalescerOneGatewayCallPerConnection(t *testing.T) {
	b := &blockingConn{release: make(chan struct{})}
	co := &coalescer{conn: b, name: "mx1", timeout: time.Minute, log: zerolog.Nop()}
	ctx := context.Background()
	type res struct {
		items []gateway.ItemResult
		err   error
	}
	results := make(chan res, 3)
	go func() { i, err := co.subscribe(ctx, nil, []string{"a1", "a2"}, nil); results <- res{i, err} }()
	testwait.For(t, 10*time.Second, "first call", func() bool { return b.nCalls() == 1 })
	go func() { i, err := co.subscribe(ctx, nil, []string{"b1"}, nil); results <- res{i, err} }()
	go func() { i, err := co.subscribe(ctx, nil, []string{"c1", "c2", "c3"}, nil); results <- res{i, err} }()
	testwait.For(t, 10*time.Second, "queued requests", func() bool { co.mu.Lock(); defer co.mu.Unlock(); return len(co.queue) == 2 })
	close(b.release)
	got := map[string]bool{}
	for range 3 {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		for _, it := range r.items {
			got[it.Tag] = true
		}
	}
	if b.nCalls() != 2 || b.peak != 1 {
		t.Fatalf("gateway calls = %d (peak concurrent %d), want 2 and 1", b.nCalls(), b.peak)
	}
	if len(b.calls[1]) != 4 || len(got) != 6 {
		t.Fatalf("second call %v, results %v: want the two queued requests merged", b.calls[1], got)
	}
}

func TestCoalescerCallOutlivesDepartedRequester(t *testing.T) {
	tests := []struct {
		name        string
		claimed     bool
		wantRemoved int
	}{
		{"superseded attempt: results still recorded", true, 0},
		{"stopped worker: items removed", false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { testDepartedRequester(t, tt.claimed, tt.wantRemoved) })
	}
}

func testDepartedRequester(t *testing.T, claimed bool, wantRemoved int) {
	b := &blockingConn{release: make(chan struct{})}
	co := &coalescer{conn: b, name: "mx1", timeout: time.Minute, log: zerolog.Nop()}
	ctx1, cancel1 := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	applied := make(chan []gateway.ItemResult, 1)
	apply := func(items []gateway.ItemResult) (bool, error) { applied <- items; return claimed, nil }
	go func() { _, err := co.subscribe(ctx1, nil, []string{"a"}, apply); errs <- err }()
	testwait.For(t, 10*time.Second, "call", func() bool { return b.nCalls() == 1 })
	cancel1()
	if err := <-errs; err == nil {
		t.Fatal("cancelled request returned no error")
	}
	b.mu.Lock()
	inFlight := b.inFlight
	b.mu.Unlock()
	if inFlight != 1 {
		t.Fatal("the gateway call was cancelled with its requester")
	}
	close(b.release)
	if items := <-applied; len(items) != 1 || items[0].Err != nil {
		t.Fatalf("applied %v", items)
	}
	testwait.For(t, 10*time.Second, "lane free", func() bool { co.mu.Lock(); defer co.mu.Unlock(); return !co.running })
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.removed) != wantRemoved {
		t.Fatalf("removed %v, want %d items", b.removed, wantRemoved)
	}
}

func TestCoalescerLostReplyFreesLaneAtCeiling(t *testing.T) {
	b := &blockingConn{release: make(chan struct{})}
	co := &coalescer{conn: b, name: "mx1", timeout: 50 * time.Millisecond, log: zerolog.Nop()}
	_, err := co.subscribe(context.Background(), nil, []string{"a"}, nil)
	if err == nil {
		t.Fatal("a never-answered call returned no error")
	}
	testwait.For(t, 10*time.Second, "lane free", func() bool { co.mu.Lock(); defer co.mu.Unlock(); return !co.running })
}

func TestManagerSlowLegacyFanOutConvergesAcrossPresumedLosses(t *testing.T) {
	// Against an old gateway one fan-out takes longer than the in-flight
	// ceiling; each presumed-lost attempt still keeps what it advised, so the
	// next asks only for the rest.
	s := sim.New(sim.Config{Capabilities: sim.OldCapabilities(), CommandCost: 3 * time.Millisecond})
	addr, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	snk := newMemSink()
	cfg := siteConfig(addr, 1, 80) // ~80 × 3 ms ≈ 240 ms of apartment time
	m := runManager(t, Options{Role: role.NewBroadcaster(role.State{Role: role.Active}), Sink: snk,
		Policy: RetryPolicy{Floor: 20 * time.Millisecond, Max: 40 * time.Millisecond, InFlightCeiling: 100 * time.Millisecond}}, cfg)
	testwait.For(t, 10*time.Second, "all tags good", func() bool { return snk.allGood(cfg) })
	if st := m.Status(); len(st) != 1 || st[0].Attempts < 2 {
		t.Fatalf("status %+v: want more than one attempt (the test must exceed the ceiling)", st)
	}
	testwait.For(t, 10*time.Second, "one advised item per tag", func() bool { return s.Stats().AdvisedItems == 80 })
}

func TestCoalescerCancelsCallWhenEveryRequesterStopped(t *testing.T) {
	b := &blockingConn{release: make(chan struct{})}
	co := &coalescer{conn: b, name: "mx1", timeout: time.Minute, log: zerolog.Nop()}
	life, stop := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() { _, err := co.subscribe(life, life, []string{"a"}, nil); errs <- err }()
	testwait.For(t, 10*time.Second, "call", func() bool { return b.nCalls() == 1 })
	stop()
	<-errs
	testwait.For(t, 10*time.Second, "gateway call cancelled", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.inFlight == 0 })
}

func TestManagerRouteForwardsWritesOnlyWhileRunning(t *testing.T) {
	r := startManager(t, sim.Config{}, false, 1, 2)
	if _, _, err := r.m.Route("Z28061", "A001"); err == nil {
		t.Fatal("route resolved while the node is not active")
	}
	r.roles.Publish(role.State{Role: role.Active, Epoch: role.Epoch{Cluster: 1, Term: 3}})
	testwait.For(t, 10*time.Second, "all tags good", func() bool { return r.sink.allGood(r.cfg) })
	w, tag, err := r.m.Route("Z28061", "A001")
	if err != nil || tag != "Z28061.A001" {
		t.Fatalf("route = %q, %v", tag, err)
	}
	ctx := gateway.WithEpoch(context.Background(), role.Epoch{Cluster: 1, Term: 3})
	if err := w.Write(ctx, tag, 7.5); err != nil {
		t.Fatal(err)
	}
	if got := r.sim.Stats().Commands[gateway.KindWrite]; got != 1 {
		t.Fatalf("gateway writes = %d, want 1", got)
	}
	if _, _, err := r.m.Route("Z28061", "Nope"); err == nil {
		t.Fatal("unknown attribute resolved")
	}
}

// An instance whose attributes sit on two gateways gets a worker per
// gateway: every attribute is subscribed and published under the one
// instance name, writes go to the gateway that carries the attribute, and
// losing one gateway's connection leaves the other's attributes live.
func TestManagerInstanceSpanningTwoConnections(t *testing.T) {
	sims := make([]*sim.Sim, 2)
	cfg := Config{}
	for i := range sims {
		sims[i] = sim.New(sim.Config{})
		addr, err := sims[i].Start("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sims[i].Stop)
		conn := fmt.Sprintf("mx%d", i+1)
		cfg.Connections = append(cfg.Connections, ConnectionConfig{Name: conn, Endpoint: addr, Options: ConnectionOptions{ProbeInterval: -1}})
		in := InstanceConfig{Name: "Z28061", Connection: conn}
		for j := range 3 {
			a := fmt.Sprintf("%s_A%d", conn, j)
			in.Attributes = append(in.Attributes, Attribute{Name: a, Tag: "Z28061." + a})
		}
		cfg.Instances = append(cfg.Instances, in)
	}
	sink := newMemSink()
	m := runManager(t, Options{Role: role.NewBroadcaster(role.State{Role: role.Active, Epoch: role.Epoch{Cluster: 1, Term: 2}}), Sink: sink,
		Policy: RetryPolicy{Floor: 50 * time.Millisecond, Max: 400 * time.Millisecond, InFlightCeiling: 2 * time.Second}}, cfg)

	testwait.For(t, 10*time.Second, "every attribute of both gateways good", func() bool { return sink.allGood(cfg) })
	testwait.For(t, 10*time.Second, "a confirmed worker per gateway", func() bool {
		ws := m.Status()
		if len(ws) != 2 {
			return false
		}
		for i, w := range ws {
			if !w.Confirmed || w.Instance != "Z28061" || w.Connection != fmt.Sprintf("mx%d", i+1) {
				return false
			}
		}
		return true
	})

	for i, s := range sims {
		// 2 would be a presumed-lost first reply on a very slow machine.
		if n := s.Stats().Commands[gateway.KindSubscribeBulk]; n < 1 || n > 2 {
			t.Errorf("gateway mx%d: SubscribeBulk commands = %d, want 1 (or 2 after a presumed loss)", i+1, n)
		}
	}

	// A write goes to the gateway that carries the attribute, only there.
	w, tag, err := m.Route("Z28061", "mx2_A1")
	if err != nil || tag != "Z28061.mx2_A1" {
		t.Fatalf("route mx2_A1 = %q, %v", tag, err)
	}
	if err := w.Write(gateway.WithEpoch(context.Background(), role.Epoch{Cluster: 1, Term: 2}), tag, 4.5); err != nil {
		t.Fatal(err)
	}
	if a, b := sims[0].Stats().Commands[gateway.KindWrite], sims[1].Stats().Commands[gateway.KindWrite]; a != 0 || b != 1 {
		t.Fatalf("writes on mx1, mx2 = %d, %d; want 0, 1", a, b)
	}

	// Dropping the second gateway from the config stops its worker only.
	one := Config{Connections: cfg.Connections[:1], Instances: cfg.Instances[:1]}
	if err := m.Apply(one); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "mx2's attributes not live, mx1's still good", func() bool {
		q2, _ := sink.quality("Z28061/mx2_A0")
		return q2 == field.QualityBadNotConnected && sink.allGood(one) && len(m.Status()) == 1
	})

}

func TestConfigValidateInstancesAcrossConnections(t *testing.T) {
	conns := []ConnectionConfig{{Name: "mx1", Endpoint: "a"}, {Name: "mx2", Endpoint: "b"}}
	attr := func(names ...string) []Attribute {
		var out []Attribute
		for _, n := range names {
			out = append(out, Attribute{Name: n, Tag: "T." + n})
		}
		return out
	}
	tests := []struct {
		name      string
		instances []InstanceConfig
		wantErr   string
	}{
		{"one instance on two connections", []InstanceConfig{
			{Name: "P1", Connection: "mx1", Attributes: attr("a")},
			{Name: "P1", Connection: "mx2", Attributes: attr("b")},
		}, ""},
		{"one instance twice on one connection", []InstanceConfig{
			{Name: "P1", Connection: "mx1", Attributes: attr("a")},
			{Name: "P1", Connection: "mx1", Attributes: attr("b")},
		}, `instance "P1" listed twice for connection "mx1"`},
		{"one attribute on two connections", []InstanceConfig{
			{Name: "P1", Connection: "mx1", Attributes: attr("a")},
			{Name: "P1", Connection: "mx2", Attributes: attr("a")},
		}, `duplicate attribute "a"`},
		{"same attribute name in two instances", []InstanceConfig{
			{Name: "P1", Connection: "mx1", Attributes: attr("a")},
			{Name: "P2", Connection: "mx2", Attributes: attr("a")},
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Config{Connections: conns, Instances: tt.instances}.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
