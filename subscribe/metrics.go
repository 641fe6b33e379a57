package subscribe

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the subscribe workers' Prometheus instruments.
type Metrics struct {
	inFlight     *prometheus.GaugeVec
	attempts     *prometheus.CounterVec
	retries      *prometheus.CounterVec
	backoff      *prometheus.GaugeVec
	confirmed    *prometheus.GaugeVec
	gatewayCalls *prometheus.GaugeVec
	coalesced    *prometheus.CounterVec
}

// NewMetrics creates the instruments and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "scadad", Subsystem: "subscribe", Name: "in_flight",
			Help: "Subscribe attempts outstanding, by connection (at most one per instance).",
		}, []string{"connection"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scadad", Subsystem: "subscribe", Name: "attempts_total",
			Help: "Subscribe attempts sent, by connection.",
		}, []string{"connection"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scadad", Subsystem: "subscribe", Name: "retries_total",
			Help: "Subscribe retries, by connection and reason (failure, presumed_lost, invalidated).",
		}, []string{"connection", "reason"}),
		backoff: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "scadad", Subsystem: "subscribe", Name: "backoff_seconds",
			Help: "Current retry interval, by connection and site instance.",
		}, []string{"connection", "site_instance"}),
		confirmed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "scadad", Subsystem: "subscribe", Name: "confirmed",
			Help: "1 when the site instance's subscription on the connection is confirmed.",
		}, []string{"connection", "site_instance"}),
		gatewayCalls: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "scadad", Subsystem: "subscribe", Name: "gateway_calls_in_flight",
			Help: "Coalesced gateway subscribe calls outstanding, by connection (at most 1).",
		}, []string{"connection"}),
		coalesced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scadad", Subsystem: "subscribe", Name: "coalesced_total",
			Help: "Subscribe requests that shared a gateway call with another instance's.",
		}, []string{"connection"}),
	}
	for _, c := range []prometheus.Collector{m.inFlight, m.attempts, m.retries, m.backoff, m.confirmed, m.gatewayCalls, m.coalesced} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register subscribe metrics: %w", err)
		}
	}
	return m, nil
}
