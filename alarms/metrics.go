package alarms

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Severity bands of OPC UA Part 9's severity range.
const (
	BandLow      = "low"      // 1..250
	BandMedium   = "medium"   // 251..500
	BandHigh     = "high"     // 501..750
	BandCritical = "critical" // 751..1000
)

// Band names the severity band of sev.
func Band(sev uint32) string {
	switch {
	case sev > 750:
		return BandCritical
	case sev > 500:
		return BandHigh
	case sev > 250:
		return BandMedium
	default:
		return BandLow
	}
}

var bands = []string{BandLow, BandMedium, BandHigh, BandCritical}

// Metrics are the alarm instruments. A nil *Metrics records nothing.
type Metrics struct {
	active, unacked, oldestUnacked *prometheus.GaugeVec
	shelved                        prometheus.Gauge
	transitions                    *prometheus.CounterVec
	history, droppedObs            prometheus.Counter
}

// NewMetrics registers the alarm metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "scadad_alarms_active",
			Help: "Active alarms in the replicated state, by severity band (low 1-250, medium 251-500, high 501-750, critical 751-1000)."}, []string{"severity_band"}),
		unacked: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "scadad_alarms_unacknowledged",
			Help: "Unacknowledged alarms (active or returned to normal), by severity band."}, []string{"severity_band"}),
		oldestUnacked: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "scadad_alarms_oldest_unacknowledged_timestamp_seconds",
			Help: "When the oldest unacknowledged active alarm of the band became active (Unix seconds); 0 when there is none."}, []string{"severity_band"}),
		shelved: prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_alarms_shelved", Help: "Shelved alarms."}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "scadad_alarm_transitions_total",
			Help: "Alarm transitions applied on this node, by kind (raised, cleared, acknowledged, confirmed, shelved, unshelved, comment, changed)."}, []string{"kind"}),
		history: prometheus.NewCounter(prometheus.CounterOpts{Name: "scadad_alarm_history_enqueued_total",
			Help: "Alarm transitions enqueued to the alarm-history target by this node (as the Active)."}),
		droppedObs: prometheus.NewCounter(prometheus.CounterOpts{Name: "scadad_alarm_observations_dropped_total",
			Help: "Alarm observations from the field dropped because the proposer was behind (recovered by the next refresh)."}),
	}
	for _, c := range []prometheus.Collector{m.active, m.unacked, m.oldestUnacked, m.shelved, m.transitions, m.history, m.droppedObs} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register alarm metrics: %w", err)
		}
	}
	for _, b := range bands {
		m.active.WithLabelValues(b)
		m.unacked.WithLabelValues(b)
		m.oldestUnacked.WithLabelValues(b)
	}
	return m, nil
}

func (m *Metrics) transition(kind string) {
	if m != nil {
		m.transitions.WithLabelValues(kind).Inc()
	}
}

func (m *Metrics) historyEnqueued(n int) {
	if m != nil {
		m.history.Add(float64(n))
	}
}

func (m *Metrics) dropped() {
	if m != nil {
		m.droppedObs.Inc()
	}
}

// updateMetrics recomputes the gauges from the replicated state.
func (s *Service) updateMetrics() {
	m := s.opts.Metrics
	if m == nil {
		return
	}
	recs, err := s.opts.State.Alarms()
	if err != nil {
		return
	}
	active, unacked := map[string]int{}, map[string]int{}
	oldest := map[string]int64{}
	shelved := 0
	for _, r := range recs {
		b := Band(r.Severity)
		if r.Shelved {
			shelved++
		}
		if r.Active {
			active[b]++
		}
		if !r.Acked {
			unacked[b]++
		}
		if r.Active && !r.Acked && (oldest[b] == 0 || r.ActiveSinceUnixNano < oldest[b]) {
			oldest[b] = r.ActiveSinceUnixNano
		}
	}
	for _, b := range bands {
		m.active.WithLabelValues(b).Set(float64(active[b]))
		m.unacked.WithLabelValues(b).Set(float64(unacked[b]))
		m.oldestUnacked.WithLabelValues(b).Set(float64(oldest[b]) / 1e9)
	}
	m.shelved.Set(float64(shelved))
}
