package opcua

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/role"
)

// startServerWithClock starts a server on clock; mutate may adjust the
// config before New.
func startServerWithClock(t *testing.T, initial role.State, clock Clock, mutate ...func(*Config)) *testServer {
	t.Helper()
	ts := &testServer{roles: role.NewBroadcaster(initial), writer: &fakeWriter{}, reg: prometheus.NewRegistry()}
	cfg := Config{
		Host: "127.0.0.1", Port: freePort(t), AllowAnonymous: true, PrivateKey: testKey(),
		PeerVerdictTTL: 30 * time.Second, RecheckInterval: time.Second,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	srv, err := New(cfg, Deps{Logger: zerolog.Nop(), Registerer: ts.reg, Roles: ts.roles, Writer: ts.writer, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	ts.Server = srv
	t.Cleanup(func() { srv.Close(); cancel() })
	return ts
}
