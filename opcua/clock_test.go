package opcua

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/role"
)

type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []clockWaiter
}

type clockWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, clockWaiter{c.now.Add(d), ch})
	return ch
}

// Advance moves time forward and fires every timer that came due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

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
