package opcua

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/promtest"
	"github.com/scadad/scadad/role"
)

// A client that stays connected does not hold a stopping server up: the
// library waits up to 10 s for every connection to end, and a client that
// keeps its session (a redundancy-aware one keeps sessions to both nodes)
// never ends it. Close bounds that wait (closeLibraryWait); the process is
// exiting or the node's OPC UA server is being replaced.
func TestCloseIsNotHeldByAConnectedClient(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	c := connect(t, ts.Endpoint())
	readValue(t, c, ts.NodeID("Pump1", "Speed"), 13) // a live session
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- ts.Close() }()
	select {
	case <-done:
	case <-time.After(closeLibraryWait + 5*time.Second):
		t.Fatalf("Close still waiting after %v with a client connected (the library's own wait is 10 s)", time.Since(start).Round(time.Millisecond))
	}
	t.Logf("Close took %v with a client connected", time.Since(start).Round(time.Millisecond))
}

// A server replaced by another on the same registry (the daemon does this
// when a deploy changes the server's options) gives its metric names back
// when it closes, started or not; the new one registers them again.
func TestReplacedServerGivesItsMetricsBack(t *testing.T) {
	reg := prometheus.NewRegistry()
	build := func() *Server {
		t.Helper()
		srv, err := New(Config{Host: "127.0.0.1", Port: freePort(t), AllowAnonymous: true, PrivateKey: testKey(), ShutdownGrace: -1},
			Deps{Logger: zerolog.Nop(), Registerer: reg, Roles: role.NewBroadcaster(activeState()), Writer: &fakeWriter{}})
		if err != nil {
			t.Fatalf("New on a registry a closed server used: %v", err)
		}
		return srv
	}
	first := build()
	if _, err := New(Config{Host: "127.0.0.1", Port: freePort(t), AllowAnonymous: true, PrivateKey: testKey()},
		Deps{Logger: zerolog.Nop(), Registerer: reg, Roles: role.NewBroadcaster(activeState()), Writer: &fakeWriter{}}); err == nil {
		t.Fatal("a second server registered the same metric names beside a running one")
	}
	first.Close() // never started
	second := build()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := second.Start(ctx); err != nil {
		t.Fatal(err)
	}
	second.Close()
	third := build()
	defer third.Close()
	if got, ok, err := promtest.Value(reg, "scadad_opcua_service_level", ""); err != nil || !ok || got != 250 {
		t.Fatalf("scadad_opcua_service_level of the third server = %v (present %v, %v), want 250", got, ok, err)
	}
}
