package opcua

import (
	"context"
	"strings"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/internal/clock/clocktest"
	"github.com/scadad/scadad/internal/testwait"
)

func TestSessionTable(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	var dropped []string
	tab := newSessionTable(func(k string) { dropped = append(dropped, k) }, func() time.Time { return now })
	a, b, c := ua.NewNumericNodeID(1, 1), ua.NewNumericNodeID(1, 2), ua.NewNumericNodeID(1, 3)
	tab.created(a, []byte{1}, 10*time.Second)
	tab.created(b, []byte{2}, 60*time.Second)
	tab.created(c, []byte{3}, 10*time.Second)

	if _, ok := tab.identity(a); ok {
		t.Fatal("a session not yet activated is served")
	}
	if !tab.activate(a, identity{name: "op"}, nil, 2) || !tab.activate(b, identity{name: "view"}, nil, 2) {
		t.Fatal("activation under the cap refused")
	}
	if !tab.full(2) || tab.full(3) || tab.full(0) {
		t.Fatal("full() does not follow the cap")
	}
	if tab.activate(c, identity{name: "third"}, nil, 2) {
		t.Fatal("a third session activated past a cap of 2")
	}
	if !tab.activate(a, identity{name: "op"}, []byte{9}, 2) {
		t.Fatal("re-activating an active session counts against the cap")
	}
	if n, ok := tab.nonce(a); !ok || len(n) != 1 || n[0] != 9 {
		t.Fatalf("the nonce of the last ActivateSession answer is not kept: %v", n)
	}
	if who, ok := tab.identity(b); !ok || who.name != "view" {
		t.Fatalf("identity of b: %+v %v", who, ok)
	}

	// 11 s on: a (10 s, last used at 0) and the pending c are idle; b
	// (60 s) is not. c holds a queued Publish request: in use.
	now = now.Add(11 * time.Second)
	if n := tab.expire(func(k string) bool { return k == tokenKey(c) }); n != 1 {
		t.Fatalf("expired %d sessions, want 1", n)
	}
	if n := tab.expire(func(string) bool { return false }); n != 1 {
		t.Fatalf("expired %d sessions, want 1 more", n)
	}
	if len(dropped) != 2 || tab.count() != 1 {
		t.Fatalf("dropped %v, %d left active", dropped, tab.count())
	}
	if _, ok := tab.identity(a); ok {
		t.Fatal("an expired session is still served")
	}
	// b is used at 11 s, so it is still there at 70 s.
	tab.identity(b)
	now = now.Add(59 * time.Second)
	if n := tab.expire(func(string) bool { return false }); n != 0 {
		t.Fatalf("a session used within its timeout expired")
	}
	tab.closed(b)
	if tab.count() != 0 || tab.full(1) {
		t.Fatal("a closed session still counts")
	}
}

// Real clients against a server on a fake clock: max_sessions refuses the
// session past the cap, and the sessions of clients that went quiet expire
// (the library would keep them for ever), which makes room again.
func TestSessionsCappedAndExpired(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	ts := startServerWithClock(t, activeState(), clock, func(c *Config) { c.MaxSessions, c.ShutdownGrace = 2, -1 })
	first := connect(t, ts.Endpoint(), gopcua.SessionTimeout(10*time.Second))
	connect(t, ts.Endpoint(), gopcua.SessionTimeout(10*time.Second))
	third, err := gopcua.NewClient(ts.Endpoint(), gopcua.SecurityMode(ua.MessageSecurityModeNone), gopcua.AutoReconnect(false),
		gopcua.DialTimeout(2*time.Second), gopcua.RequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	err = third.Connect(cctx)
	third.Close(context.Background())
	if err == nil || !strings.Contains(err.Error(), "BadTooManySessions") {
		t.Fatalf("a third session with max_sessions 2: %v, want BadTooManySessions", err)
	}

	// Both clients go quiet for longer than their 10 s session timeout.
	for range 12 {
		clock.Advance(time.Second)
	}
	testwait.For(t, 5*time.Second, "the quiet sessions to expire", func() bool {
		return metricValue(t, ts.metrics.sessions) == 0 && metricValue(t, ts.metrics.sessionsExpired) == 2
	})
	if _, err := first.Read(cctx, &ua.ReadRequest{NodesToRead: []*ua.ReadValueID{{NodeID: serviceLevelID, AttributeID: ua.AttributeIDValue}}}); err == nil ||
		!strings.Contains(err.Error(), "BadSessionIDInvalid") {
		t.Fatalf("a read on an expired session: %v, want BadSessionIDInvalid", err)
	}
	if got := readValue(t, connect(t, ts.Endpoint()), serviceLevelID, ua.AttributeIDValue); got.Value.Value() != LevelActive {
		t.Fatalf("a new client after the expiry read %v", got.Value)
	}
}
