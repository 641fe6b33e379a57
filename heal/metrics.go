package heal

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the heal's Prometheus series.
type Metrics struct {
	splitsDetected     prometheus.Counter
	splitActive        prometheus.Gauge
	merges             *prometheus.CounterVec
	messagesHandedOver prometheus.Counter
	finishedHandedOver prometheus.Counter
	handOverSeconds    prometheus.Gauge
	rejoinSeconds      prometheus.Gauge
}

// NewMetrics registers the heal metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		splitsDetected:     prometheus.NewCounter(prometheus.CounterOpts{Name: "scadad_heal_splits_detected_total", Help: "Dual-active splits this node detected (peer Active under another cluster)."}),
		splitActive:        prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_heal_split_active", Help: "1 while a detected dual-active split is not yet healed."}),
		merges:             prometheus.NewCounterVec(prometheus.CounterOpts{Name: "scadad_heal_merges_total", Help: "Merges run by this node as the loser, by result (merged, abandoned)."}, []string{"result"}),
		messagesHandedOver: prometheus.NewCounter(prometheus.CounterOpts{Name: "scadad_heal_messages_handed_over_total", Help: "S&F messages this node handed to a heal winner that lacked them."}),
		finishedHandedOver: prometheus.NewCounter(prometheus.CounterOpts{Name: "scadad_heal_finished_ids_handed_over_total", Help: "Delivered/discarded ids this node handed to a heal winner that did not know them finished."}),
		handOverSeconds:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_heal_last_handover_seconds", Help: "Duration of this node's last hand-over as a heal loser."}),
		rejoinSeconds:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_heal_last_rejoin_seconds", Help: "Time from this node's last rejoin to being Standby again."}),
	}
	if reg != nil {
		reg.MustRegister(m.splitsDetected, m.splitActive, m.merges, m.messagesHandedOver, m.finishedHandedOver, m.handOverSeconds, m.rejoinSeconds)
	}
	return m
}
