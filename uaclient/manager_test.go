//go:build unix

package uaclient

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/field"
	"github.com/scadad/scadad/internal/clock/clocktest"
	"github.com/scadad/scadad/internal/promtest"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/opcua"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/uasec"
)

// upstream is a real OPC UA server (scadad's own, over TCP on loopback)
// standing in for a third-party server the site reads as a client.
type upstream struct {
	srv    *opcua.Server
	writes chan upstreamWrite
}

type upstreamWrite struct {
	instance, attribute string
	value               any
}

type recordingWriter chan upstreamWrite

func (w recordingWriter) Write(_ context.Context, instance, attribute string, value any, _ role.Epoch) error {
	w <- upstreamWrite{instance, attribute, value}
	return nil
}

func upstreamModel() opcua.Model {
	return opcua.Model{Instances: []opcua.Instance{{Name: "Boiler", Attributes: []opcua.Attribute{
		{Name: "Temp", Type: opcua.TypeDouble, Writable: true},
		{Name: "Burner", Type: opcua.TypeBoolean},
	}}}}
}

// startUpstream serves upstreamModel on a free loopback port.
func startUpstream(t *testing.T) *upstream {
	t.Helper()
	return startUpstreamWith(t, nil)
}

// startUpstreamWith is startUpstream with the server's config changed by
// mutate.
func startUpstreamWith(t *testing.T, mutate func(*opcua.Config)) *upstream {
	t.Helper()
	for attempt := 1; ; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		u := &upstream{writes: make(chan upstreamWrite, 16)}
		cfg := opcua.Config{Host: "127.0.0.1", Port: p, AllowAnonymous: true, AnonymousCanWrite: true, ShutdownGrace: -1}
		if mutate != nil {
			mutate(&cfg)
		}
		srv, err := opcua.New(cfg,
			opcua.Deps{Logger: zerolog.Nop(), Roles: role.NewBroadcaster(role.State{Role: role.Active, Epoch: role.Epoch{Cluster: 1, Term: 1}}), Writer: recordingWriter(u.writes)})
		if err != nil {
			t.Fatalf("upstream server: %v", err)
		}
		if _, err := srv.ApplyModel(upstreamModel()); err != nil {
			t.Fatalf("upstream model: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		if err := srv.Start(ctx); err != nil {
			cancel()
			if attempt < 5 && strings.Contains(err.Error(), "address already in use") {
				continue
			}
			t.Fatalf("start upstream: %v", err)
		}
		u.srv = srv
		t.Cleanup(func() {
			srv.Close()
			cancel()
		})
		return u
	}
}

type update struct {
	instance, attribute string
	value               field.Value
	status              ua.StatusCode
}

// recorder is the Sink; it keeps the last update per attribute.
type recorder struct {
	mu   sync.Mutex
	last map[string]update
	bad  map[string]int // Bad updates per attribute
}

func (r *recorder) badCount(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bad[key]
}

func (r *recorder) TagStatus(instance, attribute string, v field.Value, status ua.StatusCode, _ time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]update{}
	}
	r.last[instance+"."+attribute] = update{instance, attribute, v, status}
	if status != ua.StatusOK {
		if r.bad == nil {
			r.bad = map[string]int{}
		}
		r.bad[instance+"."+attribute]++
	}
}

func (r *recorder) get(key string) (update, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u, ok := r.last[key]
	return u, ok
}

func connectionTo(u *upstream) Connection {
	ns := u.srv.NodeID("Boiler", "Temp").Namespace()
	return Connection{
		Name: "plc", Endpoint: u.srv.Endpoint(), Client: uasec.ClientOptions{Timeout: 2 * time.Second},
		PublishingInterval: 50 * time.Millisecond, BackoffFloor: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		Items: []Item{
			{Instance: "Line1", Attribute: "BoilerTemp", NodeID: fmt.Sprintf("ns=%d;s=Boiler.Temp", ns)},
			// By namespace URI, resolved against the server's NamespaceArray.
			{Instance: "Line1", Attribute: "Burner", NodeID: "nsu=urn:scadad:site;s=Boiler.Burner"},
		},
	}
}

func startManager(t *testing.T, roles *role.Broadcaster, sink Sink, cfg Config) *Manager {
	t.Helper()
	return startManagerWith(t, Options{Role: roles, Sink: sink, Logger: zerolog.Nop()}, cfg)
}

func startManagerWith(t *testing.T, opts Options, cfg Config) *Manager {
	t.Helper()
	m, err := NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return m
}

func hasValue(r *recorder, key string, want field.Value) func() bool {
	return func() bool {
		u, ok := r.get(key)
		return ok && u.status == ua.StatusOK && u.value == want
	}
}

func TestValuesWritesAndReconnect(t *testing.T) {
	up := startUpstream(t)
	if err := up.srv.TagUpdate("Boiler", "Temp", 71.5, ua.StatusOK, time.Now()); err != nil {
		t.Fatal(err)
	}
	// The client reaches the upstream through a link the test can cut.
	link, err := testcluster.NewProxy(strings.TrimPrefix(up.srv.Endpoint(), "opc.tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	conn := connectionTo(up)
	conn.Endpoint = "opc.tcp://" + link.Addr()
	conn.Items = append(conn.Items, Item{Instance: "Line1", Attribute: "Ghost", NodeID: conn.Items[0].NodeID + "Ghost"})
	roles := role.NewBroadcaster(role.State{Role: role.Active, Epoch: role.Epoch{Cluster: 1, Term: 3}})
	rec := &recorder{}
	m := startManager(t, roles, rec, Config{Connections: []Connection{conn}})

	// The current value arrives, then each change.
	testwait.For(t, 15*time.Second, "initial BoilerTemp 71.5", hasValue(rec, "Line1.BoilerTemp", 71.5))
	if err := up.srv.TagUpdate("Boiler", "Burner", true, ua.StatusOK, time.Now()); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 15*time.Second, "Burner true", hasValue(rec, "Line1.Burner", true))
	// A node the upstream does not have stays Bad; the others are served.
	if u, ok := rec.get("Line1.Ghost"); !ok || u.status != ua.StatusBadConfigurationError {
		t.Errorf("Ghost = %+v (seen %v), want Bad config error", u, ok)
	}
	if err := up.srv.TagUpdate("Boiler", "Temp", 80.25, ua.StatusOK, time.Now()); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 15*time.Second, "BoilerTemp 80.25", hasValue(rec, "Line1.BoilerTemp", 80.25))
	if v := metricValue(t, m.metrics.connected.WithLabelValues("plc")); v != 1 {
		t.Errorf("scadad_opcua_client_connected = %v while subscribed, want 1", v)
	}

	// A write goes to the upstream node carrying the attribute.
	if err := m.Write(context.Background(), "Line1", "BoilerTemp", 65.0); err != nil {
		t.Fatalf("Write: %v", err)
	}
	select {
	case w := <-up.writes:
		if w.instance != "Boiler" || w.attribute != "Temp" || w.value != 65.0 {
			t.Errorf("upstream got write %+v, want Boiler.Temp = 65", w)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("upstream saw no write")
	}
	if err := m.Write(context.Background(), "Line1", "Nope", 1.0); err == nil || !strings.Contains(err.Error(), "Line1.Nope") {
		t.Errorf("write of an unknown attribute: %v, want an error naming it", err)
	}
	// The upstream refuses a read-only node; the error says so.
	if err := m.Write(context.Background(), "Line1", "Burner", false); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("write of a read-only upstream node: %v, want refused", err)
	}

	// The upstream goes away: the attributes turn Bad, the write fails
	// with a clear error, and the session comes back with the server.
	link.Cut(true)
	testwait.For(t, 15*time.Second, "BoilerTemp Bad after the link dropped", func() bool {
		u, ok := rec.get("Line1.BoilerTemp")
		return ok && u.status != ua.StatusOK && u.value == nil
	})

	if err := m.Write(context.Background(), "Line1", "BoilerTemp", 1.0); err == nil || !strings.Contains(err.Error(), "not connected") {
		t.Errorf("write while disconnected: %v, want not connected", err)
	}
	if v := metricValue(t, m.metrics.lost.WithLabelValues("plc")); v < 1 {
		t.Errorf("scadad_opcua_client_sessions_lost_total = %v after the link dropped, want >= 1", v)
	}
	if err := up.srv.TagUpdate("Boiler", "Temp", 90.0, ua.StatusOK, time.Now()); err != nil {
		t.Fatal(err)
	}
	link.Cut(false)
	testwait.For(t, 15*time.Second, "BoilerTemp 90 once the link is back", hasValue(rec, "Line1.BoilerTemp", 90.0))
	if st := m.Status(); len(st) != 1 || !st[0].Connected || st[0].Items != 3 {
		t.Errorf("status %+v, want one connected connection with 3 items", st)
	}
}

// A subscription whose values do not change is quiet (gopcua does not pass
// the server's keep-alives on); the session must stay open as long as the
// server answers, not be reopened for the silence.
func TestQuietUpstreamKeepsTheSession(t *testing.T) {
	up := startUpstream(t)
	if err := up.srv.TagUpdate("Boiler", "Temp", 5.0, ua.StatusOK, time.Now()); err != nil {
		t.Fatal(err)
	}
	roles := role.NewBroadcaster(role.State{Role: role.Active, Epoch: role.Epoch{Cluster: 1, Term: 3}})
	rec := &recorder{}
	conn := connectionTo(up)
	conn.Items = conn.Items[:1]
	reg := prometheus.NewRegistry()
	// The first notification gets a second of real time (100 s at 100x).
	m := startManagerWith(t, Options{Role: roles, Sink: rec, Logger: zerolog.Nop(), Clock: clocktest.Fast(100), Registerer: reg, InitialValuesWait: 100 * time.Second},
		Config{Connections: []Connection{conn}})
	testwait.For(t, 15*time.Second, "BoilerTemp 5", hasValue(rec, "Line1.BoilerTemp", 5.0))
	m.mu.Lock()
	s := m.sessions["plc"]
	m.mu.Unlock()
	testwait.For(t, 15*time.Second, "30 answered server-state reads (a minute of keep-alives at 100x)", func() bool { return s.stateReads.Load() >= 30 })
	if n := rec.badCount("Line1.BoilerTemp"); n != 0 {
		t.Fatalf("the quiet session was dropped %d times", n)
	}
	if n, _, _ := promtest.Value(reg, "scadad_opcua_client_resubscribed_total", "plc"); n != 0 {
		t.Fatalf("the quiet subscription was opened again %v times: its first notification came", n)
	}
}

// A subscription that delivers nothing at all (gopcua's client can leave
// its publish loop paused for good) is opened again instead of leaving the
// values read at subscribe time standing as Good for ever; the values stay
// Good meanwhile. Simulated with an upstream whose first publishing cycle
// ends after 10 s while the client's wait (three intervals) passes 100
// times faster.
func TestSilentSubscriptionIsOpenedAgain(t *testing.T) {
	up := startUpstreamWith(t, func(c *opcua.Config) {
		c.MinPublishingInterval = 10 * time.Second
		c.MaxPublishingInterval = 10 * time.Second
	})
	if err := up.srv.TagUpdate("Boiler", "Temp", 5.0, ua.StatusOK, time.Now()); err != nil {
		t.Fatal(err)
	}
	roles := role.NewBroadcaster(role.State{Role: role.Active, Epoch: role.Epoch{Cluster: 1, Term: 3}})
	rec := &recorder{}
	conn := connectionTo(up)
	conn.Items = conn.Items[:1]
	reg := prometheus.NewRegistry()
	startManagerWith(t, Options{Role: roles, Sink: rec, Logger: zerolog.Nop(), Clock: clocktest.Fast(100), Registerer: reg}, Config{Connections: []Connection{conn}})
	testwait.For(t, 15*time.Second, "BoilerTemp 5", hasValue(rec, "Line1.BoilerTemp", 5.0))
	testwait.For(t, 15*time.Second, "the silent subscription opened again twice", func() bool {
		n, _, _ := promtest.Value(reg, "scadad_opcua_client_resubscribed_total", "plc")
		return n >= 2
	})

	if n := rec.badCount("Line1.BoilerTemp"); n != 0 {
		t.Fatalf("BoilerTemp went Bad %d times while the subscription was opened again", n)
	}
}

func TestSessionsFollowTheRole(t *testing.T) {
	up := startUpstream(t)
	if err := up.srv.TagUpdate("Boiler", "Temp", 10.0, ua.StatusOK, time.Now()); err != nil {
		t.Fatal(err)
	}
	roles := role.NewBroadcaster(role.State{Role: role.Standby})
	rec := &recorder{}
	m := startManager(t, roles, rec, Config{Connections: []Connection{connectionTo(up)}})

	roles.Publish(role.State{Role: role.Active, Epoch: role.Epoch{Cluster: 1, Term: 4}})
	testwait.For(t, 15*time.Second, "a value once Active", hasValue(rec, "Line1.BoilerTemp", 10.0))
	roles.Publish(role.State{Role: role.Standby, Epoch: role.Epoch{Cluster: 1, Term: 5}})
	testwait.For(t, 15*time.Second, "no session and Bad values once Standby", func() bool {
		u, _ := rec.get("Line1.BoilerTemp")
		return len(m.Status()) == 0 && u.status != ua.StatusOK
	})

	// In hot-standby mode the Standby reads too.
	cfg := Config{HotStandby: true, Connections: []Connection{connectionTo(up)}}
	if err := m.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 15*time.Second, "a value on a hot Standby", hasValue(rec, "Line1.BoilerTemp", 10.0))
	if !m.Carries("Line1", "Burner") || m.Carries("Line1", "Other") {
		t.Error("Carries does not follow the configuration")
	}
}

func TestConfigValidate(t *testing.T) {
	good := Connection{Name: "plc", Endpoint: "opc.tcp://127.0.0.1:4840", Client: uasec.ClientOptions{Timeout: time.Second}, PublishingInterval: time.Second, BackoffFloor: time.Second, BackoffMax: time.Minute,
		Items: []Item{{Instance: "A", Attribute: "x", NodeID: "ns=2;s=A.x"}}}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"valid", func(*Config) {}, ""},
		{"bad node id", func(c *Config) { c.Connections[0].Items[0].NodeID = "ns=two;s=x" }, `node id "ns=two;s=x"`},
		{"namespace uri", func(c *Config) { c.Connections[0].Items[0].NodeID = "nsu=urn:plant;s=A.x" }, ""},
		{"bad id after a namespace uri", func(c *Config) { c.Connections[0].Items[0].NodeID = "nsu=urn:plant;i=x" }, `node id "nsu=urn:plant;i=x"`},
		{"no endpoint", func(c *Config) { c.Connections[0].Endpoint = "" }, "endpoint required"},
		{"no request timeout", func(c *Config) { c.Connections[0].Client.Timeout = 0 }, "request timeout 0s is not positive"},
		{"backoff", func(c *Config) { c.Connections[0].BackoffMax = time.Millisecond }, "needs 0 < floor <= max"},
		{"duplicate name", func(c *Config) { c.Connections = append(c.Connections, c.Connections[0]) }, "duplicate name"},
		{"attribute on two connections", func(c *Config) {
			other := c.Connections[0]
			other.Name = "plc2"
			c.Connections = append(c.Connections, other)
		}, `attribute A.x already read on connection "plc"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{Connections: []Connection{good}}
			c.Connections[0].Items = append([]Item(nil), good.Items...)
			tt.mutate(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestValueMapping(t *testing.T) {
	for _, tt := range []struct {
		in   any
		want field.Value
		ok   bool
	}{{float32(1.5), 1.5, true}, {int16(-3), int64(-3), true}, {uint32(7), int64(7), true}, {"s", "s", true}, {[]byte("b"), nil, false}, {uint64(1 << 63), nil, false},
		{2.5, 2.5, true}, {true, true, true}, {nil, nil, true}, {int64(-1 << 63), int64(-1 << 63), true}, {time.Time{}, nil, false}} {
		got, ok := plainValue(tt.in)
		if ok != tt.ok || got != tt.want {
			t.Errorf("plainValue(%T %v) = %v %v, want %v %v", tt.in, tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestConnectionEqualComparesKeysByValue(t *testing.T) {
	k1, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	// As a redeploy reloads it from its file: the same key, a new object.
	reloaded, err := x509.ParsePKCS1PrivateKey(x509.MarshalPKCS1PrivateKey(k1))
	if err != nil {
		t.Fatal(err)
	}
	a := Connection{Name: "plc", Client: uasec.ClientOptions{PrivateKey: k1}}
	for _, tt := range []struct {
		name string
		b    Connection
		want bool
	}{
		{"same key, reloaded", Connection{Name: "plc", Client: uasec.ClientOptions{PrivateKey: reloaded}}, true},
		{"other key", Connection{Name: "plc", Client: uasec.ClientOptions{PrivateKey: k2}}, false},
		{"no key", Connection{Name: "plc"}, false},
		{"other endpoint", Connection{Name: "plc", Endpoint: "opc.tcp://x:1", Client: uasec.ClientOptions{PrivateKey: k1}}, false},
	} {
		if got := a.equal(tt.b); got != tt.want {
			t.Errorf("%s: equal = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// metricValue reads a gauge or counter.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if g := out.GetGauge(); g != nil {
		return g.GetValue()
	}
	return out.GetCounter().GetValue()
}

func TestUnreachableConnectionReadsNotConnected(t *testing.T) {
	dead, err := testcluster.DeadAddr()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	roles := role.NewBroadcaster(role.State{Role: role.Active, Epoch: role.Epoch{Cluster: 1, Term: 1}})
	conn := Connection{Name: "dead", Endpoint: "opc.tcp://" + dead, Client: uasec.ClientOptions{Timeout: time.Second},
		PublishingInterval: 50 * time.Millisecond, BackoffFloor: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		Items: []Item{{Instance: "Line1", Attribute: "BoilerTemp", NodeID: "ns=1;s=Boiler.Temp"}}}
	startManagerWith(t, Options{Role: roles, Sink: &recorder{}, Logger: zerolog.Nop(), Registerer: reg}, Config{Connections: []Connection{conn}})
	// A connection that never comes up must read 0, not be absent: an
	// alert on connected == 0 would otherwise never fire for it.
	testwait.For(t, 15*time.Second, "connected 0 for the unreachable upstream", func() bool {
		v, ok, err := promtest.Value(reg, "scadad_opcua_client_connected", "dead")
		return err == nil && ok && v == 0
	})

}

// Upstream StatusCodes reach the sink whole: UncertainLastUsableValue and
// a specific Bad code are not flattened to Uncertain and Bad (issue 22,
// defect 2).
func TestUpstreamStatusCodesKeptWhole(t *testing.T) {
	up := startUpstream(t)
	roles := role.NewBroadcaster(role.State{Role: role.Active, Epoch: role.Epoch{Cluster: 1, Term: 3}})
	rec := &recorder{}
	startManager(t, roles, rec, Config{Connections: []Connection{connectionTo(up)}})
	for _, code := range []ua.StatusCode{ua.StatusUncertainLastUsableValue, ua.StatusBadSensorFailure, ua.StatusOK} {
		if err := up.srv.TagUpdate("Boiler", "Temp", 60.5, code, time.Now()); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, 15*time.Second, fmt.Sprintf("BoilerTemp with status 0x%08X", uint32(code)), func() bool {
			u, ok := rec.get("Line1.BoilerTemp")
			return ok && u.status == code && u.value == 60.5
		})
	}
}
