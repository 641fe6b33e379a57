package gateway_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/gateway"
	"github.com/scadad/scadad/gateway/sim"
	"github.com/scadad/scadad/internal/lockedbuf"
	"github.com/scadad/scadad/internal/promtest"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/role"
)

// recorder is a gateway.Handler that remembers what it was told.
type recorder struct {
	mu     sync.Mutex
	states []gateway.State
	events []gateway.DataChange
	alarms []gateway.Alarm
}

func (r *recorder) DataChange(d gateway.DataChange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, d)
}

func (r *recorder) ConnectionState(s gateway.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, s)
}

func (r *recorder) eventCount(tag string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Tag == tag {
			n++
		}
	}
	return n
}

func (r *recorder) last() gateway.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.states) == 0 {
		return gateway.State{}
	}
	return r.states[len(r.states)-1]
}

type rig struct {
	sim    *sim.Sim
	client *gateway.Client
	rec    *recorder
	reg    *prometheus.Registry
	logs   *lockedbuf.Buffer
}

func startRig(t *testing.T, scfg sim.Config, ccfg gateway.Config) *rig {
	t.Helper()
	s := sim.New(scfg)
	addr, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	r := &rig{sim: s, rec: &recorder{}, reg: prometheus.NewRegistry(), logs: &lockedbuf.Buffer{}}
	m, err := gateway.NewMetrics(r.reg)
	if err != nil {
		t.Fatal(err)
	}
	ccfg.Endpoint = addr
	ccfg.Name = "conn-1"
	ccfg.Handler = r.rec
	ccfg.Metrics = m
	ccfg.Logger = zerolog.New(r.logs)
	if ccfg.ReconnectFloor == 0 {
		ccfg.ReconnectFloor = 10 * time.Millisecond
	}
	if ccfg.ProbeInterval == 0 {
		ccfg.ProbeInterval = -1
	}
	c, err := gateway.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	r.client = c
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; _ = c.Close() })
	testwait.For(t, 10*time.Second, "session open", func() bool { return c.State().Good })
	return r
}

func tags(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s.Attr%03d", prefix, i)
	}
	return out
}

func TestSubscribeNegotiatesBulkSupervisory(t *testing.T) {
	input := append(tags(20, "Z28061"), "bad.Missing", "Z28061.Last")
	tests := []struct {
		name         string
		caps         []string
		legacy       bool
		wantCommands map[string]int64
	}{
		{"capability present: one SubscribeBulk", sim.NewCapabilities(), false,
			map[string]int64{gateway.KindSubscribeBulk: 1}},
		{"capability absent: legacy AddItemBulk + per-item AdviseSupervisory", sim.OldCapabilities(), false,
			map[string]int64{gateway.KindAddItemBulk: 1, gateway.KindAdviseSupervisory: 21}},
		{"capability present, bulk not preferred: legacy", sim.NewCapabilities(), true,
			map[string]int64{gateway.KindAddItemBulk: 1, gateway.KindAdviseSupervisory: 21}},
	}
	var results [][]gateway.ItemResult
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := startRig(t, sim.Config{Capabilities: tt.caps, BadTagPrefix: "bad."}, gateway.Config{LegacySubscribe: tt.legacy})
			got, err := r.client.SubscribeTags(context.Background(), input)
			if err != nil {
				t.Fatal(err)
			}
			st := r.sim.Stats()
			for kind, want := range tt.wantCommands {
				if st.Commands[kind] != want {
					t.Errorf("%s commands = %d, want %d (all: %v)", kind, st.Commands[kind], want, st.Commands)
				}
			}
			var total int64
			for _, n := range st.Commands {
				total += n
			}
			var wantTotal int64
			for _, n := range tt.wantCommands {
				wantTotal += n
			}
			if total != wantTotal {
				t.Errorf("total commands = %d, want %d (%v)", total, wantTotal, st.Commands)
			}
			if st.PlainAdviseOnSupervisory != 0 {
				t.Errorf("%d items advised plain on a supervisory session", st.PlainAdviseOnSupervisory)
			}
			if st.AdvisedItems != len(input)-1 {
				t.Errorf("advised items = %d, want %d", st.AdvisedItems, len(input)-1)
			}
			for i, res := range got {
				if (res.Err != nil) != strings.HasPrefix(input[i], "bad.") {
					t.Errorf("tag %q: err = %v", input[i], res.Err)
				}
			}
			// Data changes reach the handler only for the items we hold.
			testwait.For(t, 10*time.Second, "initial values", func() bool { return r.rec.eventCount("Z28061.Last") > 0 })
			if n := r.rec.eventCount("bad.Missing"); n != 0 {
				t.Errorf("got %d events for a failed tag", n)
			}
			results = append(results, got)
		})
	}
	// Handle bookkeeping is identical across both paths.
	if len(results) == len(tests) {
		for i := range results[0] {
			a, b := results[0][i], results[1][i]
			if a.Tag != b.Tag || a.Handle != b.Handle || (a.Err == nil) != (b.Err == nil) {
				t.Errorf("item %d differs: bulk %+v, legacy %+v", i, a, b)
			}
		}
	}
}

func TestNeverSupervisoryBulkToOldGatewayEvenWithWriteUserPlain(t *testing.T) {
	// With a write user configured the client subscribes plain in one
	// SubscribeBulk on any gateway, and never sets supervisory.
	r := startRig(t, sim.Config{Capabilities: sim.OldCapabilities()}, gateway.Config{WriteUserID: 7})
	if _, err := r.client.SubscribeTags(context.Background(), tags(5, "Z")); err != nil {
		t.Fatal(err)
	}
	st := r.sim.Stats()
	if st.Commands[gateway.KindSubscribeBulk] != 1 || st.Commands[gateway.KindAdviseSupervisory] != 0 {
		t.Fatalf("commands = %v, want one plain SubscribeBulk", st.Commands)
	}
}

func TestCommandTimeoutSentAndEchoLogged(t *testing.T) {
	tests := []struct {
		name          string
		requested     time.Duration
		maxTimeout    time.Duration
		wantRequested time.Duration
		wantLog       string
	}{
		{"default 60s honoured", 0, 0, 60 * time.Second, `"gateway_command_timeout":60000`},
		{"clamped by gateway is a warning", 0, 30 * time.Second, 60 * time.Second, `"level":"warn"`},
		{"legacy sends none", -1, 0, 0, `"requested_command_timeout":"gateway default"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := startRig(t, sim.Config{MaxCommandTimeout: tt.maxTimeout}, gateway.Config{CommandTimeout: tt.requested})
			if got := r.sim.Stats().LastRequestedTimeout; got != tt.wantRequested {
				t.Errorf("gateway saw command_timeout %v, want %v", got, tt.wantRequested)
			}
			logs := r.logs.String()
			var line string
			for _, l := range strings.Split(logs, "\n") {
				if strings.Contains(l, "gateway session open") {
					line = l
				}
			}
			if !strings.Contains(line, tt.wantLog) {
				t.Errorf("session-open log %q lacks %q", line, tt.wantLog)
			}
		})
	}
}

func TestGracefulStreamEndIsNotADisconnect(t *testing.T) {
	r := startRig(t, sim.Config{ChangeInterval: 5 * time.Millisecond}, gateway.Config{})
	if _, err := r.client.SubscribeTags(context.Background(), []string{"T.A"}); err != nil {
		t.Fatal(err)
	}
	before := r.client.State()
	testwait.For(t, 10*time.Second, "events", func() bool { return r.rec.eventCount("T.A") > 0 })
	r.sim.EndEventStreams()
	n := r.rec.eventCount("T.A")
	testwait.For(t, 10*time.Second, "events after the stream ended", func() bool { return r.rec.eventCount("T.A") > n+3 })
	if after := r.client.State(); after != before {
		t.Fatalf("state changed from %+v to %+v after a graceful stream end", before, after)
	}
	if got := r.sim.Stats().SessionsOpened; got != 1 {
		t.Fatalf("sessions opened = %d, want 1", got)
	}
}

func TestReconnectsAfterGatewayRestart(t *testing.T) {
	r := startRig(t, sim.Config{}, gateway.Config{})
	first := r.client.State().Session
	r.sim.Restart()
	testwait.For(t, 10*time.Second, "new session", func() bool {
		st := r.client.State()
		return st.Good && st.Session > first
	})

	sawBad := false
	r.rec.mu.Lock()
	for _, s := range r.rec.states {
		if !s.Good && s.Session == first {
			sawBad = true
		}
	}
	r.rec.mu.Unlock()
	if !sawBad {
		t.Error("handler never saw the old session go bad")
	}
	if _, err := r.client.SubscribeTags(context.Background(), []string{"T.A"}); err != nil {
		t.Fatalf("subscribe on the new session: %v", err)
	}
}

func TestProbeMarksWedgeBadAndRecoveryGood(t *testing.T) {
	r := startRig(t, sim.Config{}, gateway.Config{ProbeInterval: 10 * time.Millisecond, ProbeTimeout: 50 * time.Millisecond})
	r.sim.Wedge(300 * time.Millisecond)
	testwait.For(t, 10*time.Second, "bad during wedge", func() bool { return !r.rec.last().Good })
	testwait.For(t, 10*time.Second, "good after wedge", func() bool { return r.rec.last().Good })
	if got := r.sim.Stats().SessionsOpened; got != 1 {
		t.Fatalf("a wedge must not cost the session; sessions opened = %d", got)
	}
}

func TestGatewayDeadlineExceededIsCounted(t *testing.T) {
	r := startRig(t, sim.Config{DefaultCommandTimeout: 20 * time.Millisecond, CommandCost: 200 * time.Millisecond}, gateway.Config{CommandTimeout: -1})
	_, err := r.client.SubscribeTags(context.Background(), []string{"T.A"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if got := r.sim.Stats().DeadlineExceeded; got != 1 {
		t.Errorf("sim deadline exceeded = %d, want 1", got)
	}
	if got := counterSum(t, r.reg, "scadad_gateway_deadline_exceeded_total"); got != 1 {
		t.Errorf("deadline metric = %v, want 1", got)
	}
}

func TestWriteCarriesFencingEpoch(t *testing.T) {
	current := role.Epoch{Cluster: 1, Term: 5}
	r := startRig(t, sim.Config{}, gateway.Config{Epoch: func() (role.Epoch, bool) { return current, true }})
	ctx := context.Background()
	if err := r.client.Write(ctx, "T.SP", 42.5); err != nil {
		t.Fatal(err)
	}
	got, err := r.client.Read(ctx, "T.SP")
	if err != nil || got.Value != 42.5 {
		t.Fatalf("read back %v, %v; want 42.5", got.Value, err)
	}
	// A newer epoch from elsewhere fences this writer off.
	if err := r.client.Write(gateway.WithEpoch(ctx, role.Epoch{Cluster: 2, Term: 1}), "T.SP", 1.0); err != nil {
		t.Fatal(err)
	}
	err = r.client.Write(ctx, "T.SP", 2.0)
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stale write err = %v, want FailedPrecondition", err)
	}
	if st := r.sim.Stats(); st.StaleEpochWrites != 1 || st.WritesWithoutEpoch != 0 {
		t.Fatalf("stale=%d without=%d, want 1 and 0", st.StaleEpochWrites, st.WritesWithoutEpoch)
	}
}

func TestWriteWithoutEpochIsRefused(t *testing.T) {
	r := startRig(t, sim.Config{}, gateway.Config{})
	if err := r.client.Write(context.Background(), "T.SP", 1.0); err == nil {
		t.Fatal("write without an epoch succeeded")
	}
	if got := r.sim.Stats().Commands[gateway.KindWrite]; got != 0 {
		t.Fatalf("gateway saw %d writes, want 0", got)
	}
}

func TestRemoveItemsStopsEvents(t *testing.T) {
	r := startRig(t, sim.Config{ChangeInterval: 5 * time.Millisecond}, gateway.Config{})
	res, err := r.client.SubscribeTags(context.Background(), []string{"T.A", "T.B"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.client.RemoveItems(context.Background(), []int32{res[0].Handle}); err != nil {
		t.Fatal(err)
	}
	n := r.rec.eventCount("T.A")
	m := r.rec.eventCount("T.B")
	testwait.For(t, 10*time.Second, "events for the kept tag", func() bool { return r.rec.eventCount("T.B") > m+3 })
	if got := r.rec.eventCount("T.A"); got != n {
		t.Fatalf("removed tag got %d more events", got-n)
	}
	if got := r.sim.Stats().AdvisedItems; got != 1 {
		t.Fatalf("advised items = %d, want 1", got)
	}
}

func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func TestUnreachableGatewayReadsNotGood(t *testing.T) {
	dead, err := testcluster.DeadAddr()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := gateway.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := gateway.New(gateway.Config{Name: "dead", Endpoint: dead, Handler: &recorder{}, Metrics: m,
		Logger: zerolog.Nop(), ReconnectFloor: 10 * time.Millisecond, ProbeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done; _ = c.Close() }()
	// A gateway that never answers must read 0, not be absent: an alert on
	// connection_good == 0 would otherwise never fire for it.
	testwait.For(t, 10*time.Second, "connection_good 0 for the unreachable gateway", func() bool {
		v, ok, err := promtest.Value(reg, "scadad_gateway_connection_good", "dead")
		return err == nil && ok && v == 0
	})

}

// TestStoppedClientLeavesNoConnectionGauge: a client that stops (its
// connection removed or renamed by a deploy, or the node no longer Active)
// takes its connection_good series with it. A 0 left behind made the
// Active's ScadadGatewayDown fire, and keep firing until a restart, for a
// connection the site no longer has.
func TestStoppedClientLeavesNoConnectionGauge(t *testing.T) {
	s := sim.New(sim.Config{})
	addr, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	reg := prometheus.NewRegistry()
	m, err := gateway.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := gateway.New(gateway.Config{Name: "old", Endpoint: addr, Handler: &recorder{}, Metrics: m,
		Logger: zerolog.Nop(), ReconnectFloor: 10 * time.Millisecond, ProbeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	testwait.For(t, 10*time.Second, "connection_good 1 for the running client", func() bool {
		v, ok, err := promtest.Value(reg, "scadad_gateway_connection_good", "old")
		return err == nil && ok && v == 1
	})

	cancel()
	<-done
	if v, ok, err := promtest.Value(reg, "scadad_gateway_connection_good", "old"); err != nil || ok {
		t.Fatalf("connection_good{connection=\"old\"} = %v (present %v, err %v) after the client stopped; want no series", v, ok, err)
	}
}

// TestGatewayDownIsRedialledAboutEverySecond: while a gateway is down the
// client keeps dialling it about a second apart, so a gateway that comes
// back is in session within a couple of seconds. grpc's own reconnect
// backoff grows to two minutes, and while it waits every OpenSession fails
// at once with the last dial error: a gateway down for five minutes was
// back in session two minutes after it returned (a 30 s ReconnectMax
// notwithstanding), its values Bad and ScadadGatewayDown firing meanwhile.
// Here the "gateway" accepts TCP connections and closes them, so every
// dial fails and each one is seen.
func TestGatewayDownIsRedialledAboutEverySecond(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var dials []time.Time
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			dials = append(dials, time.Now())
			mu.Unlock()
			c.Close()
		}
	}()
	c, err := gateway.New(gateway.Config{Name: "down", Endpoint: ln.Addr().String(), Handler: &recorder{},
		Logger: zerolog.Nop(), ReconnectFloor: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond, ProbeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done; _ = c.Close() }()
	// grpc's default backoff (1 s × 1.6ⁿ, ±20 %) leaves a gap of at least
	// 3.2 s within the first 10 s; one that stays near a second never does.
	start := time.Now()
	time.Sleep(10 * time.Second)
	end := time.Now()
	mu.Lock()
	defer mu.Unlock()
	if len(dials) == 0 {
		t.Fatal("the client never dialled the gateway")
	}
	prev, widest := start, time.Duration(0)
	for _, d := range append(dials, end) {
		widest = max(widest, d.Sub(prev))
		prev = d
	}
	t.Logf("%d dials in 10 s, widest gap %v", len(dials), widest.Round(time.Millisecond))
	if widest > 2500*time.Millisecond {
		t.Fatalf("%d dials in 10 s, widest gap %v: a gateway back now would wait that long for its session", len(dials), widest.Round(time.Millisecond))
	}
}
