package opcua

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/role"
)

// testKey is generated once: RSA key generation costs more than a whole
// test on a shared two-core machine.
var testKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type writeCall struct {
	instance, attribute string
	value               any
	epoch               role.Epoch
}

type fakeWriter struct {
	mu    sync.Mutex
	calls []writeCall
	err   error
}

func (w *fakeWriter) Write(_ context.Context, instance, attribute string, value any, epoch role.Epoch) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, writeCall{instance, attribute, value, epoch})
	return w.err
}

func (w *fakeWriter) Calls() []writeCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]writeCall(nil), w.calls...)
}

type testServer struct {
	*Server
	roles  *role.Broadcaster
	writer *fakeWriter
	reg    *prometheus.Registry
}

func activeState() role.State {
	return role.State{Role: role.Active, Epoch: role.Epoch{Cluster: 1, Term: 7}, NodeID: "a", Leader: "a", Voters: 2}
}

func testModel() Model {
	return Model{Instances: []Instance{
		{Name: "Pump1", Attributes: []Attribute{
			{Name: "Speed", Type: TypeDouble, Writable: true},
			{Name: "Running", Type: TypeBoolean},
		}},
		{Name: "Tank1", Attributes: []Attribute{
			{Name: "Level", Type: TypeFloat},
			{Name: "Label", Type: TypeString, Writable: true},
		}},
	}}
}

// startServer starts a server on a free 127.0.0.1 port. mutate may adjust
// the config before New. A port taken between freePort and Start (other
// test binaries run in parallel) is retried with a new one.
func startServer(t testing.TB, initial role.State, mutate func(*Config)) *testServer {
	t.Helper()
	for attempt := 1; ; attempt++ {
		ts, err := tryStartServer(t, initial, mutate)
		if err == nil {
			return ts
		}
		if attempt == 5 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("Start: %v", err)
		}
	}
}

func tryStartServer(t testing.TB, initial role.State, mutate func(*Config)) (*testServer, error) {
	t.Helper()
	port := freePort(t)
	cfg := Config{
		Host:           "127.0.0.1",
		Port:           port,
		AllowAnonymous: true,
		// The write-gate tests write anonymously; the identity tests
		// turn it off.
		AnonymousCanWrite: true,
		PrivateKey:        testKey(),
		Peers:             []Peer{{ApplicationURI: "urn:scadad:peer", EndpointURL: "opc.tcp://127.0.0.1:1"}},
		// Tests that need the shutdown grace ask for it.
		ShutdownGrace: -1,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	ts := &testServer{roles: role.NewBroadcaster(initial), writer: &fakeWriter{}, reg: prometheus.NewRegistry()}
	srv, err := New(cfg, Deps{Logger: zerolog.Nop(), Registerer: ts.reg, Roles: ts.roles, Writer: ts.writer})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if _, err := srv.ApplyModel(testModel()); err != nil {
		t.Fatalf("ApplyModel: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
		cancel()
		return nil, err
	}
	ts.Server = srv
	t.Cleanup(func() {
		srv.Close()
		cancel()
	})
	return ts, nil
}

func connect(t testing.TB, endpoint string, opts ...gopcua.Option) *gopcua.Client {
	t.Helper()
	base := []gopcua.Option{
		gopcua.SecurityMode(ua.MessageSecurityModeNone),
		gopcua.AutoReconnect(false),
		gopcua.RequestTimeout(3 * time.Second),
		gopcua.DialTimeout(2 * time.Second),
	}
	c, err := gopcua.NewClient(endpoint, append(base, opts...)...)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Connect(ctx); err != nil {
		t.Fatalf("connect %s: %v", endpoint, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func readValue(t *testing.T, c *gopcua.Client, nid *ua.NodeID, attr ua.AttributeID) *ua.DataValue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := c.Read(ctx, &ua.ReadRequest{NodesToRead: []*ua.ReadValueID{{NodeID: nid, AttributeID: attr}}, TimestampsToReturn: ua.TimestampsToReturnBoth})
	if err != nil {
		t.Fatalf("read %s: %v", nid, err)
	}
	if len(resp.Results) != 1 {
		t.Fatalf("read %s: %d results", nid, len(resp.Results))
	}
	return resp.Results[0]
}

func writeValue(t *testing.T, c *gopcua.Client, nid *ua.NodeID, attr ua.AttributeID, v *ua.Variant) ua.StatusCode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := c.Write(ctx, &ua.WriteRequest{NodesToWrite: []*ua.WriteValue{{
		NodeID: nid, AttributeID: attr, Value: &ua.DataValue{EncodingMask: ua.DataValueValue, Value: v},
	}}})
	if err != nil {
		t.Fatalf("write %s: %v", nid, err)
	}
	if len(resp.Results) != 1 {
		t.Fatalf("write %s: %d results", nid, len(resp.Results))
	}
	return resp.Results[0]
}

var serviceLevelID = ua.NewNumericNodeID(0, 2267)

// metricValue reads a counter or gauge without prometheus/testutil, whose
// extra dependencies are not in go.mod.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatalf("read metric: %v", err)
	}
	if out.Counter != nil {
		return out.Counter.GetValue()
	}
	return out.Gauge.GetValue()
}
