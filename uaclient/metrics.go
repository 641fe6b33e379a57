package uaclient

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the client sessions' Prometheus instruments.
type metrics struct {
	connected *prometheus.GaugeVec
	lost      *prometheus.CounterVec
	// resubscribed counts subscriptions replaced because they delivered
	// nothing at all (see Options.InitialValuesWait).
	resubscribed *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "scadad", Subsystem: "opcua_client", Name: "connected",
			Help: "1 while the OPC UA client connection's session is subscribed, by connection.",
		}, []string{"connection"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scadad", Subsystem: "opcua_client", Name: "sessions_lost_total",
			Help: "OPC UA client sessions that failed to open or were lost, by connection.",
		}, []string{"connection"}),
		resubscribed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scadad", Subsystem: "opcua_client", Name: "resubscribed_total",
			Help: "OPC UA client subscriptions opened again because the first delivered no notification, by connection.",
		}, []string{"connection"}),
	}
	for _, c := range []prometheus.Collector{m.connected, m.lost, m.resubscribed} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register opc ua client metrics: %w", err)
		}
	}
	return m, nil
}
