package main

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
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
// while unhealthy, none without a watchdog. It runs in a synctest bubble:
// the ticker is the only clock, so the counts are exact.
func TestKeepWatchdogPingsOnlyWhileHealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &recordingNotifier{}
		var healthy atomic.Bool
		healthy.Store(true)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			keepWatchdog(ctx, n, 20*time.Millisecond, healthy.Load, zerolog.Nop())
			close(done)
		}()
		time.Sleep(35 * time.Millisecond)
		synctest.Wait()
		if got := n.count(); got != 3 {
			t.Fatalf("%d pings in 35 ms with a 20 ms watchdog, want 3 (at 10, 20 and 30 ms)", got)
		}
		healthy.Store(false)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if got := n.count(); got != 3 {
			t.Fatalf("%d pings while unhealthy", got-3)
		}
		cancel()
		<-done
		for _, s := range n.states {
			if s != "WATCHDOG=1" {
				t.Fatalf("notified %q", s)
			}
		}
		keepWatchdog(context.Background(), n, 0, func() bool { return true }, zerolog.Nop()) // returns at once
	})
}
