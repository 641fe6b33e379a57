package gateway

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the client's Prometheus instruments, shared by every Client
// (one per connection) and labelled by connection name.
type Metrics struct {
	commands         *prometheus.CounterVec
	deadlineExceeded *prometheus.CounterVec
	connected        *prometheus.GaugeVec
	sessionsOpened   *prometheus.CounterVec
	orphanEvents     *prometheus.CounterVec
}

// NewMetrics creates the instruments and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scadad", Subsystem: "gateway", Name: "commands_total",
			Help: "Gateway commands sent, by connection and command kind.",
		}, []string{"connection", "kind"}),
		deadlineExceeded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scadad", Subsystem: "gateway", Name: "deadline_exceeded_total",
			Help: "Gateway commands answered DEADLINE_EXCEEDED, by connection and command kind.",
		}, []string{"connection", "kind"}),
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "scadad", Subsystem: "gateway", Name: "connection_good",
			Help: "1 while the connection has a session that answers probes.",
		}, []string{"connection"}),
		sessionsOpened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scadad", Subsystem: "gateway", Name: "sessions_opened_total",
			Help: "Gateway sessions opened (first open and every reconnect).",
		}, []string{"connection"}),
		orphanEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scadad", Subsystem: "gateway", Name: "orphan_events_total",
			Help: "Data changes for item handles the client does not hold (dropped).",
		}, []string{"connection"}),
	}
	for _, c := range []prometheus.Collector{m.commands, m.deadlineExceeded, m.connected, m.sessionsOpened, m.orphanEvents} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register gateway metrics: %w", err)
		}
	}
	return m, nil
}
