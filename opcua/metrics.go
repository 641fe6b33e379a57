package opcua

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the OPC UA server's Prometheus series, registered per server
// and unregistered when it closes.
type metrics struct {
	denied          *prometheus.CounterVec
	writes          *prometheus.CounterVec
	serviceLevel    prometheus.Gauge
	levelChanges    *prometheus.CounterVec
	panics          *prometheus.CounterVec
	rejected        *prometheus.CounterVec
	sessions        prometheus.Gauge
	sessionsExpired prometheus.Counter
	subscriptions   prometheus.Gauge
	monitoredItems  prometheus.Gauge
	coalesced       prometheus.Counter
	subsExpired     prometheus.Counter
	publishFailed   prometheus.Counter
	refused         *prometheus.CounterVec
	connections     prometheus.Gauge
	stalled         prometheus.Counter
	restarts        prometheus.Counter
	eventsDropped   prometheus.Counter
	unacksDropped   prometheus.Counter
	calls           *prometheus.CounterVec
	levelPublished  atomic.Bool

	// reg and registered let a closed server take its collectors back
	// off the registry: the daemon builds a new server (and registers the
	// same names again) when a deploy changes the server's options.
	reg        prometheus.Registerer
	registered []prometheus.Collector
}

// unregister takes the collectors back off the registry.
func (m *metrics) unregister() {
	for _, c := range m.registered {
		m.reg.Unregister(c)
	}
	m.registered = nil
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scadad_opcua_write_denied_total",
			Help: "Client writes refused by the role gate (secondary, detached, role-unknown) or because the session's identity may not write (read-only-identity).",
		}, []string{"reason"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scadad_opcua_writes_total",
			Help: "Client write operations by result (ok, invalid, denied, failed).",
		}, []string{"result"}),
		serviceLevel: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "scadad_opcua_service_level",
			Help: "The ServiceLevel this node publishes.",
		}),
		levelChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scadad_opcua_service_level_changes_total",
			Help: "ServiceLevel transitions, by the new level.",
		}, []string{"level"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scadad_opcua_handler_panics_total",
			Help: "Panics recovered in OPC UA request handling, by service.",
		}, []string{"service"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scadad_opcua_requests_rejected_total",
			Help: "Requests refused before reaching the library, by reason.",
		}, []string{"reason"}),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "scadad_opcua_sessions",
			Help: "Activated OPC UA client sessions.",
		}),
		sessionsExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "scadad_opcua_sessions_expired_total",
			Help: "Sessions forgotten because their client sent no request for their session timeout.",
		}),
		subscriptions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "scadad_opcua_subscriptions",
			Help: "OPC UA subscriptions the server holds.",
		}),
		monitoredItems: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "scadad_opcua_monitored_items",
			Help: "OPC UA monitored items the server holds.",
		}),
		coalesced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "scadad_opcua_notifications_coalesced_total",
			Help: "Values of a monitored item replaced by a newer one before a Publish response carried them (queue size 1).",
		}),
		subsExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "scadad_opcua_subscriptions_expired_total",
			Help: "Subscriptions deleted because their client sent no Publish request for their lifetime.",
		}),
		publishFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "scadad_opcua_publish_send_failures_total",
			Help: "Publish responses that could not be written to the client's channel.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scadad_opcua_connections_refused_total",
			Help: "TCP connections closed before the OPC UA server saw them, by reason (no_hello: closed, reset or silent before a whole Hello; not_hello; busy: too many waiting for their Hello; backend: the library's listener did not take it or answer its Hello; total, per_address: over max_connections or max_connections_per_address).",
		}, []string{"reason"}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "scadad_opcua_connections",
			Help: "Client connections open to the OPC UA server.",
		}),
		stalled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "scadad_opcua_clients_stalled_total",
			Help: "Client connections closed because the client stopped reading what the server sent (see front.go).",
		}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "scadad_opcua_server_restarts_total",
			Help: "Times the OPC UA library's server was replaced because it took a connection and did not answer its Hello (see WORKAROUNDS.md row 17); its clients reconnected.",
		}),
		eventsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "scadad_opcua_events_dropped_total",
			Help: "Events dropped from a full event monitored item queue (the oldest goes) before a Publish response carried them.",
		}),
		unacksDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "scadad_opcua_retransmission_dropped_total",
			Help: "Sent NotificationMessages dropped unacknowledged from a full retransmission queue (the oldest goes); Republish of one answers BadMessageNotAvailable.",
		}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scadad_opcua_method_calls_total",
			Help: "Method calls (Call service) by method (ConditionRefresh, Acknowledge, Confirm, AddComment, unknown) and result (ok, refused, failed).",
		}, []string{"method", "result"}),
	}
	m.reg = reg
	for _, c := range []prometheus.Collector{m.denied, m.writes, m.serviceLevel, m.levelChanges, m.panics, m.rejected,
		m.sessions, m.sessionsExpired, m.subscriptions, m.monitoredItems, m.coalesced, m.subsExpired, m.publishFailed, m.refused,
		m.connections, m.stalled, m.restarts, m.eventsDropped, m.unacksDropped, m.calls} {
		if err := reg.Register(c); err != nil {
			m.unregister()
			return nil, err
		}
		m.registered = append(m.registered, c)
	}
	for _, r := range []string{DenySecondary, DenyDetached, DenyRoleUnknown} {
		m.denied.WithLabelValues(r)
	}
	for _, r := range []string{refusedNoHello, refusedNotHello, refusedBusy, refusedBackend, refusedPolicy, refusedMode, refusedCertificate, refusedMalformed, refusedTooLarge} {
		m.refused.WithLabelValues(r)
	}
	return m, nil
}
