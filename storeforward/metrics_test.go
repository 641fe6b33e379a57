package storeforward

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/promtest"
	"github.com/scadad/scadad/internal/testwait"
)

func TestMetrics(t *testing.T) {
	h := newHarness(t, activeState(1, 1))
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg, h.f)
	if err != nil {
		t.Fatal(err)
	}
	// Components with metrics over the harness's FSM.
	s := newSink(t, h.roles, func(r received, n int) int {
		if r.ID == "fails-once" && n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	d, err := NewDeliverer(DelivererOptions{Reader: h.f, Proposer: h.p, Roles: h.roles, Metrics: m, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEnqueuer(EnqueuerOptions{Proposer: h.p, Targets: d, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := d.SetTargets([]Target{fastTarget("up", s.srv.URL)}); err != nil {
		t.Fatal(err)
	}
	// A configured target's counters are there at 0 before any message.
	for _, name := range []string{"scadad_sf_enqueued_total", "scadad_sf_delivered_total", "scadad_sf_delivery_errors_total", "scadad_sf_parked_total"} {
		if got := gathered(t, reg, name, "up"); got != 0 {
			t.Errorf("%s{target=\"up\"} = %v before any message, want 0 (-1: absent)", name, got)
		}
	}
	for _, id := range []string{"a", "b", "a"} {
		if _, err := e.Enqueue(context.Background(), "up", []byte("x"), id, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := gathered(t, reg, "scadad_sf_enqueued_total", "up"); got != 2 {
		t.Fatalf("enqueued = %v, want 2", got)
	}
	if got := gathered(t, reg, "scadad_sf_enqueue_duplicates_total", "up"); got != 1 {
		t.Fatalf("duplicates = %v, want 1", got)
	}
	if got := gathered(t, reg, "scadad_sf_pending", "up"); got != 2 {
		t.Fatalf("pending gauge = %v, want 2", got)
	}

	if _, err := e.Enqueue(context.Background(), "up", []byte("x"), "fails-once", nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testwait.For(t, 10*time.Second, "delivered", func() bool { return h.stats(t, "up").Pending == 0 })
	if got := gathered(t, reg, "scadad_sf_delivered_total", "up"); got != 3 {
		t.Fatalf("delivered = %v, want 3", got)
	}
	if got := gathered(t, reg, "scadad_sf_delivery_errors_total", "up"); got != 1 {
		t.Fatalf("delivery errors = %v, want 1", got)
	}
	if got := gathered(t, reg, "scadad_sf_enqueue_batch_messages", ""); got != 4 {
		t.Fatalf("enqueue batches observed = %v, want 4 (sequential enqueues)", got)
	}
	if got := gathered(t, reg, "scadad_sf_pending", "up"); got != 0 {
		t.Fatalf("pending gauge after delivery = %v", got)
	}
	if _, err := NewMetrics(reg, nil); err == nil {
		t.Fatal("registering twice on one registry succeeded")
	}
}

// gathered returns the value of the metric name whose label (target,
// rule or reason) has the value label, -1 when there is no such series.
func gathered(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	v, ok, err := promtest.Value(reg, name, label)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return -1
	}
	return v
}

// Every drop reason is there from the start at 0: a counter series born at
// its first drops shows no increase() to an alert rule.
func TestHistoryDropReasonsStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewMetrics(reg, nil); err != nil {
		t.Fatal(err)
	}
	for _, reason := range []string{"buffer_full", "retry_overflow", "encode", "too_large", "invalid", "stopped"} {
		if got := gathered(t, reg, "scadad_history_values_dropped_total", reason); got != 0 {
			t.Errorf("scadad_history_values_dropped_total{reason=%q} = %v before any drop, want 0 (-1: absent)", reason, got)
		}
	}
}
