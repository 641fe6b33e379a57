package opcua

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uasc"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/clock/clocktest"
	"github.com/scadad/scadad/internal/lockedbuf"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/uasec"
)

func deadURL(t *testing.T) string { return fmt.Sprintf("opc.tcp://127.0.0.1:%d", freePort(t)) }

func standbyState() role.State {
	return role.State{Role: role.Standby, Epoch: role.Epoch{Cluster: 1, Term: 7}, NodeID: "b", Leader: "a", Voters: 2}
}

func TestPick(t *testing.T) {
	standby := startServer(t, standbyState(), nil)
	active := startServer(t, activeState(), nil)
	active2 := startServer(t, activeState(), nil)
	down := startServer(t, role.State{Voters: 2}, nil)
	dead := deadURL(t)
	ctx := context.Background()

	url, levels, err := Pick(ctx, []string{standby.Endpoint(), dead, active.Endpoint()})
	if err != nil || url != active.Endpoint() {
		t.Fatalf("pick = %q %v, want the active endpoint", url, err)
	}
	if levels[standby.Endpoint()] != LevelStandby || levels[active.Endpoint()] != LevelActive || len(levels) != 2 {
		t.Fatalf("levels %v", levels)
	}
	if url, _, _ := Pick(ctx, []string{active2.Endpoint(), active.Endpoint()}); url != active2.Endpoint() {
		t.Fatalf("tie went to %q, want the first listed", url)
	}
	if _, _, err := Pick(ctx, []string{down.Endpoint(), dead}); err == nil {
		t.Fatal("picked an endpoint publishing ServiceLevel 0")
	}
	if _, _, err := Pick(ctx, []string{dead}); err == nil {
		t.Fatal("picked from no reachable endpoint")
	}
	if _, _, err := Pick(ctx, nil); err == nil {
		t.Fatal("picked from an empty list")
	}
}

func TestProberWithRealEndpoints(t *testing.T) {
	ts := startServer(t, standbyState(), nil)
	dead := deadURL(t)
	var mu sync.Mutex
	var seen []Verdict
	p := NewProber(ProberConfig{
		Endpoints: []string{ts.Endpoint(), dead},
		Client:    uasec.ClientOptions{Timeout: time.Second},
		OnVerdict: func(v Verdict) { mu.Lock(); seen = append(seen, v); mu.Unlock() },
	})
	vs := p.ProbeOnce(context.Background())
	if len(vs) != 2 || !vs[0].Reachable || vs[0].ServiceLevel != LevelStandby || vs[1].Reachable || vs[1].Err == "" {
		t.Fatalf("verdicts %+v", vs)
	}
	if v, ok := p.Latest(dead); !ok || v.Reachable {
		t.Fatalf("latest for dead peer %+v %v", v, ok)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("OnVerdict called %d times, want 2", len(seen))
	}
}

// A peer whose endpoints are all secure answers discovery but gives the
// probe no session: it is reachable, its level unread. Before, every probe
// of such a peer failed, and the peer left the healthy tiers for good.
func TestProberReachesASecureOnlyPeer(t *testing.T) {
	ts := startServer(t, standbyState(), func(c *Config) {
		c.Security = []SecurityProfile{{Policy: "Basic256Sha256", Mode: "SignAndEncrypt"}}
		c.AllowAnonymous = false
		c.Users = []User{{Name: "operator", Password: "s3cret"}}
		c.TrustedClientsDir = t.TempDir()
	})
	p := NewProber(ProberConfig{Endpoints: []string{ts.Endpoint()}, Client: uasec.ClientOptions{Timeout: time.Second}})
	vs := p.ProbeOnce(context.Background())
	if len(vs) != 1 || !vs[0].Reachable || vs[0].ServiceLevel != 0 || vs[0].Err != "" {
		t.Fatalf("verdicts %+v", vs)
	}
	_, err := ReadServiceLevel(context.Background(), ts.Endpoint(), uasec.ClientOptions{Timeout: time.Second})
	if err == nil {
		t.Fatal("a None session on a secure-only server was served: the probe's fallback proves nothing")
	}
	if !strings.Contains(err.Error(), "the server offers Basic256Sha256/SignAndEncrypt, not None/None") {
		t.Fatalf("the refusal does not say what the server offers: %v", err)
	}
}

func TestProberRunsOnItsClock(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	calls := 0
	reachable := true
	verdicts := make(chan Verdict, 16)
	p := NewProber(ProberConfig{
		Endpoints: []string{"opc.tcp://peer:4840"},
		Interval:  2 * time.Second,
		Clock:     clock,
		Read: func(ctx context.Context, endpoint string) (byte, error) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if !reachable {
				return 0, errors.New("connection refused")
			}
			return LevelActive, nil
		},
		OnVerdict: func(v Verdict) { verdicts <- v },
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	next := func() Verdict {
		select {
		case v := <-verdicts:
			return v
		case <-time.After(5 * time.Second):
			t.Fatal("no verdict")
			return Verdict{}
		}
	}
	if v := next(); !v.Reachable || v.ServiceLevel != LevelActive || !v.At.Equal(clock.Now()) {
		t.Fatalf("first verdict %+v", v)
	}
	mu.Lock()
	reachable = false
	mu.Unlock()
	// No probe until the interval passes on the injected clock.
	select {
	case v := <-verdicts:
		t.Fatalf("probed before the interval: %+v", v)
	case <-time.After(50 * time.Millisecond):
	}
	testwait.For(t, 5*time.Second, "second probe after the interval", func() bool {
		clock.Advance(2 * time.Second)
		select {
		case v := <-verdicts:
			if v.Reachable || v.Err == "" {
				t.Fatalf("second verdict %+v", v)
			}
			return true
		default:
			return false
		}
	})
}

// A value that does not change keeps the subscription quiet (gopcua does
// not pass keep-alives on); watch must stay on a server that still
// answers rather than report a failover every few seconds.
func TestWatchStaysOnAQuietServer(t *testing.T) {
	a := startServer(t, activeState(), nil)
	if err := a.TagUpdate("Pump1", "Speed", 1.0, ua.StatusOK, time.Now()); err != nil {
		t.Fatal(err)
	}
	out := &lockedbuf.Buffer{}
	// Longer than initialValuesWait: the initial values end that wait.
	ctx, cancel := context.WithTimeout(context.Background(), initialValuesWait+1500*time.Millisecond)
	defer cancel()
	if err := WatchWith(ctx, []string{a.Endpoint()}, a.NodeID("Pump1", "Speed").String(), out, uasec.ClientOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); strings.Contains(got, "leaving") || !strings.Contains(got, "Pump1.Speed = 1") {
		t.Fatalf("watch of a quiet value, want the value once and no leaving:\n%s", got)
	}
}

func TestWatchFollowsFailover(t *testing.T) {
	grace := func(c *Config) { c.ShutdownGrace = 300 * time.Millisecond }
	a := startServer(t, activeState(), grace)
	b := startServer(t, standbyState(), grace)

	// The feed: both nodes see the same tag changing, as the subscribe
	// workers would deliver it.
	feedCtx, stopFeed := context.WithCancel(context.Background())
	defer stopFeed()
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-feedCtx.Done():
				return
			case <-tick.C:
				now := time.Now()
				a.TagUpdate("Pump1", "Speed", float64(i), ua.StatusOK, now)
				b.TagUpdate("Pump1", "Speed", float64(i), ua.StatusOK, now)
			}
		}
	}()

	out := &lockedbuf.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("watch events:\n%s", events(out.String()))
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, []string{a.Endpoint(), b.Endpoint()}, a.NodeID("Pump1", "Speed").String(), out)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Watch did not return after cancel")
		}
	}()
	has := func(s string) func() bool { return func() bool { return strings.Contains(out.String(), s) } }
	testwait.For(t, 10*time.Second, "watch to start on A", has("on "+a.Endpoint()))
	testwait.For(t, 10*time.Second, "values from A", has(a.Endpoint()+" ns=2;s=Pump1.Speed = "))

	// Planned failover: A steps down, B takes over.
	a.roles.Publish(standbyState())
	b.roles.Publish(role.State{Role: role.Active, Epoch: role.Epoch{Cluster: 1, Term: 8}, NodeID: "b", Leader: "b", Voters: 2})
	testwait.For(t, 15*time.Second, "failover to B", has("failover "+a.Endpoint()+" -> "+b.Endpoint()))
	testwait.For(t, 10*time.Second, "the notification gap", has("notification gap"))
	testwait.For(t, 10*time.Second, "values from B", has(b.Endpoint()+" ns=2;s=Pump1.Speed = "))

	// Crash: B disappears, A is promoted.
	gaps := strings.Count(out.String(), "notification gap")
	a.roles.Publish(activeState())
	b.Close()
	testwait.For(t, 20*time.Second, "failover back to A", has("failover "+b.Endpoint()+" -> "+a.Endpoint()))
	testwait.For(t, 10*time.Second, "a second gap", func() bool { return strings.Count(out.String(), "notification gap") > gaps })
	t.Logf("watch events:\n%s", events(out.String()))
}

// The gap a failover-following client reports runs to the first new Good
// value: the server it moves to may hold no value yet (Bad) or the old one,
// and neither is data a client can use.
func TestWatchGapEndsAtTheFirstNewGoodValue(t *testing.T) {
	grace := func(c *Config) { c.ShutdownGrace = 300 * time.Millisecond }
	a := startServer(t, activeState(), grace)
	b := startServer(t, standbyState(), grace)
	out := &lockedbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, []string{a.Endpoint(), b.Endpoint()}, a.NodeID("Pump1", "Speed").String(), out)
	}()
	defer func() { cancel(); <-done }()
	has := func(s string) func() bool { return func() bool { return strings.Contains(out.String(), s) } }
	testwait.For(t, 10*time.Second, "watch to start on A", has("on "+a.Endpoint()))
	last := time.Now()
	a.TagUpdate("Pump1", "Speed", 1.0, ua.StatusOK, last)
	// B holds the same value A last had, and nothing newer.
	b.TagUpdate("Pump1", "Speed", 1.0, ua.StatusOK, last)
	testwait.For(t, 10*time.Second, "the value from A", has(a.Endpoint()+" ns=2;s=Pump1.Speed = 1"))

	a.roles.Publish(standbyState())
	b.roles.Publish(role.State{Role: role.Active, Epoch: role.Epoch{Cluster: 1, Term: 8}, NodeID: "b", Leader: "b", Voters: 2})
	testwait.For(t, 15*time.Second, "the old value from B", has(b.Endpoint()+" ns=2;s=Pump1.Speed = 1"))
	if strings.Contains(out.String(), "notification gap") {
		t.Fatalf("a gap ended by the old value again:\n%s", out.String())
	}
	time.Sleep(300 * time.Millisecond) // the gap to be measured, not a wait for a condition
	b.TagUpdate("Pump1", "Speed", 2.0, ua.StatusOK, time.Now())
	testwait.For(t, 10*time.Second, "the gap", has("notification gap"))
	m := regexp.MustCompile(`notification gap (\S+)`).FindStringSubmatch(out.String())
	d, err := time.ParseDuration(m[1])
	if err != nil || d < 300*time.Millisecond {
		t.Fatalf("gap %q (%v), want at least the 300 ms before B had a new value:\n%s", m[1], err, out.String())
	}
}

// events drops the value lines from Watch output.
func events(s string) string {
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if !strings.Contains(l, " = ") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// TestCloseIsBounded: gopcua reports Closed on the client's state channel
// and waits on Close's context for room there; a channel its owner no
// longer drains must not hold the closer for good.
func TestCloseIsBounded(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	opts := uasec.ClientOptions{Timeout: 300 * time.Millisecond}
	// Room for Connecting and Connected only: Closed finds it full.
	states := make(chan gopcua.ConnState, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := uasec.Dial(ctx, ts.Endpoint(), opts, gopcua.StateChangedCh(states))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	closed := make(chan struct{})
	go func() { opts.Close(c); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close still blocked 10 s after a 300 ms bound")
	}
	if got := len(states); got != 2 {
		t.Fatalf("state channel holds %d states, want the 2 of connecting", got)
	}
}

func TestStatusName(t *testing.T) {
	for _, tc := range []struct {
		code ua.StatusCode
		want string
	}{
		{ua.StatusOK, "Good"},
		{ua.StatusBadWaitingForInitialData, "BadWaitingForInitialData 0x80320000"},
		{ua.StatusBad, "Bad 0x80000000"},
		{ua.StatusCode(0x80FF0000), "0x80FF0000"},
	} {
		if got := statusName(tc.code); got != tc.want {
			t.Errorf("statusName(%#x) = %q, want %q", uint32(tc.code), got, tc.want)
		}
	}
}

// TestWatchOfAnUnknownNodeStops: a node id the server does not have ends
// the watch with an error that says so, instead of reconnecting in a
// tight loop (which left a subscription behind on every pass).
func TestWatchOfAnUnknownNodeStops(t *testing.T) {
	a := startServer(t, activeState(), nil)
	out := &lockedbuf.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := WatchWith(ctx, []string{a.Endpoint()}, "ns=2;s=Pump1.Nope", out, uasec.ClientOptions{})
	if !errors.Is(err, errUnknownNode) || ctx.Err() != nil {
		t.Fatalf("watch of an unknown node = %v (context %v); want errUnknownNode before the deadline\n%s", err, ctx.Err(), out.String())
	}
	if n := strings.Count(out.String(), "leaving"); n != 0 {
		t.Fatalf("watch left the server %d times before giving up:\n%s", n, out.String())
	}
}

// TestWatchLeavesASilentSubscription: a subscription that never delivers
// its initial values (gopcua's client can leave its publish loop paused;
// here the server drops every Publish response) is left and made again,
// rather than watched in silence for good.
func TestWatchLeavesASilentSubscription(t *testing.T) {
	a := startServer(t, activeState(), nil)
	a.subs.mu.Lock()
	a.subs.send = func(*uasc.SecureChannel, uint32, ua.Response) error { return nil }
	a.subs.mu.Unlock()
	out := &lockedbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- WatchWith(ctx, []string{a.Endpoint()}, a.NodeID("Pump1", "Speed").String(), out, uasec.ClientOptions{})
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Watch did not return after cancel")
		}
	}()
	testwait.For(t, 3*initialValuesWait, "watch to leave the silent subscription", func() bool {
		return strings.Contains(out.String(), "leaving "+a.Endpoint()+": no initial values")
	})
}

// A peer unreachable from the first probe (the site's nodes start
// together) is info until it has been for probeStartGrace, then one
// warning; a peer that was reachable and is lost is a warning at once.
func TestProberLogsAStartingPeerQuietly(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	var buf lockedbuf.Buffer
	reachable := false
	p := NewProber(ProberConfig{
		Endpoints: []string{"opc.tcp://peer:4840"},
		Clock:     clock,
		Logger:    zerolog.New(&buf),
		Read: func(context.Context, string) (byte, error) {
			if !reachable {
				return 0, errors.New("connection refused")
			}
			return LevelStandby, nil
		},
	})
	steps := []struct {
		after     time.Duration
		reachable bool
		want      string // the line logged ("" none): level and a piece of the message
	}{
		{0, false, `"level":"info".*not reachable yet`},
		{10 * time.Second, false, ""},
		{20 * time.Second, false, `"level":"warn".*unreachable since this node started`},
		{10 * time.Second, false, ""},
		{2 * time.Second, true, `"level":"info".*"reachable":true`},
		{2 * time.Second, false, `"level":"warn".*"reachable":false.*opcua peer probe`},
		{60 * time.Second, false, ""},
	}
	for i, s := range steps {
		clock.Advance(s.after)
		reachable = s.reachable
		before := len(buf.String())
		p.ProbeOnce(context.Background())
		got := strings.TrimSpace(buf.String()[before:])
		if s.want == "" {
			if got != "" {
				t.Fatalf("step %d: logged %s, want nothing", i, got)
			}
			continue
		}
		if strings.Count(got, "\n") != 0 || !regexp.MustCompile(s.want).MatchString(got) {
			t.Fatalf("step %d: logged %q, want one line matching %s", i, got, s.want)
		}
	}
}

// WatchEvents hands over what Watch prints, as values a script can
// encode: the start, the ServiceLevel and each value with its status.
func TestWatchEventsCarryWhatTheTextSays(t *testing.T) {
	a := startServer(t, activeState(), nil)
	if err := a.TagUpdate("Pump1", "Speed", 1.5, ua.StatusOK, time.Now()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	kinds := map[string]WatchEvent{}
	err := WatchEvents(ctx, []string{a.Endpoint()}, a.NodeID("Pump1", "Speed").String(), uasec.ClientOptions{}, func(e WatchEvent) {
		mu.Lock()
		defer mu.Unlock()
		kinds[e.Kind] = e
		if _, err := json.Marshal(e); err != nil {
			t.Errorf("event %+v does not encode: %v", e, err)
		}
		if kinds[WatchValue].Kind != "" && kinds[WatchServiceLevel].Kind != "" {
			cancel()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	start, v, lvl := kinds[WatchStarted], kinds[WatchValue], kinds[WatchServiceLevel]
	if start.Endpoint != a.Endpoint() || start.Levels[a.Endpoint()] != 250 {
		t.Errorf("start: %+v", start)
	}
	if v.Value != 1.5 || v.Status != "Good" || v.Source.IsZero() || !strings.Contains(v.Text(), "Pump1.Speed = 1.5 (Good, source ") {
		t.Errorf("value: %+v, text %q", v, v.Text())
	}
	if lvl.Level == nil || *lvl.Level != 250 {
		t.Errorf("service level: %+v", lvl)
	}
}
