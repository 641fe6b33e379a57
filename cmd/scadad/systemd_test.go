package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/testwait"
)

type recordingNotifier struct {
	mu     sync.Mutex
	states []string
}

func (r *recordingNotifier) Notify(state string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, state)
	return true, nil
}

func (r *recordingNotifier) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.states)
}

// TestKeepWatchdogPingsOnlyWhileHealthy: pings at half the interval, none
// while unhealthy, none without a watchdog.
func TestKeepWatchdogPingsOnlyWhileHealthy(t *testing.T) {
	n := &recordingNotifier{}
	var mu sync.Mutex
	healthy := true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		keepWatchdog(ctx, n, 20*time.Millisecond, func() bool { mu.Lock(); defer mu.Unlock(); return healthy }, zerolog.Nop())
		close(done)
	}()
	testwait.For(t, 5*time.Second, "three watchdog pings", func() bool { return n.count() >= 3 })
	mu.Lock()
	healthy = false
	mu.Unlock()
	time.Sleep(30 * time.Millisecond) // a ping already under way
	before := n.count()
	time.Sleep(100 * time.Millisecond)
	if got := n.count(); got != before {
		t.Fatalf("%d pings while unhealthy", got-before)
	}
	cancel()
	<-done
	for _, s := range n.states {
		if s != "WATCHDOG=1" {
			t.Fatalf("notified %q", s)
		}
	}
	keepWatchdog(context.Background(), n, 0, func() bool { return true }, zerolog.Nop()) // returns at once
}
