package storeforward

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the package's Prometheus instruments. A nil *Metrics records
// nothing, so components work without metrics in tests.
type Metrics struct {
	enqueued       *prometheus.CounterVec
	duplicates     *prometheus.CounterVec
	delivered      *prometheus.CounterVec
	deliveryErrors *prometheus.CounterVec
	parkedTotal    *prometheus.CounterVec
	targetFull     *prometheus.CounterVec
	enqueueBatch   prometheus.Histogram
	removeBatch    prometheus.Histogram
	enqueueLatency prometheus.Histogram
	deliveryTime   *prometheus.HistogramVec
	historySent    *prometheus.CounterVec
	historyValues  *prometheus.CounterVec
	historyDropped *prometheus.CounterVec
	historyWaiting prometheus.Gauge
}

// NewMetrics registers the instruments on reg (never the global registry
// unless the caller passes it). When reader is non-nil, pending and parked
// gauges per target are read from it at scrape time.
func NewMetrics(reg prometheus.Registerer, reader Reader) (*Metrics, error) {
	m := &Metrics{
		enqueued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scadad_sf_enqueued_total", Help: "Messages stored by this node's enqueues, by target.",
		}, []string{"target"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scadad_sf_enqueue_duplicates_total", Help: "Enqueues whose id was already stored, by target.",
		}, []string{"target"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scadad_sf_delivered_total", Help: "Messages delivered (2xx) by this process since it started, by target (scadactl sf stats shows the replicated total).",
		}, []string{"target"}),
		deliveryErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scadad_sf_delivery_errors_total", Help: "Failed delivery attempts, by target.",
		}, []string{"target"}),
		parkedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scadad_sf_parked_total", Help: "Messages this node parked, by target and reason (refused: a permanent refusal, parked at once; max_attempts: the target's max attempts failed).",
		}, []string{"target", "reason"}),
		targetFull: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scadad_sf_target_full_total", Help: "Enqueues this node refused because the target held its max_pending messages, by target.",
		}, []string{"target"}),
		enqueueBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "scadad_sf_enqueue_batch_messages", Help: "Messages per group-committed SFEnqueue command.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		removeBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "scadad_sf_delivered_batch_ids", Help: "Ids per SFDelivered command.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		enqueueLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "scadad_sf_enqueue_seconds", Help: "Enqueue latency from call to commit.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		deliveryTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "scadad_sf_delivery_seconds", Help: "Duration of one delivery attempt, by target.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"target"}),
		historySent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scadad_history_messages_total", Help: "Tag history messages enqueued by this node, by rule.",
		}, []string{"rule"}),
		historyValues: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scadad_history_values_total", Help: "Tag values in the history messages enqueued by this node, by rule.",
		}, []string{"rule"}),
		historyDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scadad_history_values_dropped_total", Help: "Tag values the history forwarder dropped, by reason (buffer_full, retry_overflow, encode, too_large, invalid, stopped).",
		}, []string{"reason"}),
		historyWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "scadad_history_values_waiting", Help: "Tag values in history batches waiting for the buffer to take them (an enqueue failed and is retried).",
		}),
	}
	// Every drop reason from zero, so that increase() sees the first drops
	// (a counter series born at N shows no increase).
	for _, reason := range []string{dropBufferFull, dropRetryOverflow, dropEncode, dropTooLarge, dropInvalid, dropStopped} {
		m.historyDropped.WithLabelValues(reason)
	}
	cs := []prometheus.Collector{m.enqueued, m.duplicates, m.delivered, m.deliveryErrors, m.parkedTotal, m.targetFull,
		m.enqueueBatch, m.removeBatch, m.enqueueLatency, m.deliveryTime, m.historySent, m.historyValues, m.historyDropped, m.historyWaiting}
	if reader != nil {
		cs = append(cs, &bufferCollector{reader: reader})
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register store-and-forward metrics: %w", err)
		}
	}
	return m, nil
}

// knowTargets starts each configured target's counters at 0, so a
// dashboard shows them before the first message and rate() and increase()
// see the first events (a counter series born at 1 shows no increase).
func (m *Metrics) knowTargets(names []string) {
	if m == nil {
		return
	}
	for _, name := range names {
		m.enqueued.WithLabelValues(name)
		m.duplicates.WithLabelValues(name)
		m.delivered.WithLabelValues(name)
		m.deliveryErrors.WithLabelValues(name)
		m.parkedTotal.WithLabelValues(name, ParkRefused)
		m.parkedTotal.WithLabelValues(name, ParkMaxAttempts)
		m.targetFull.WithLabelValues(name)
	}
}

func (m *Metrics) observeTargetFull(target string) {
	if m != nil {
		m.targetFull.WithLabelValues(target).Inc()
	}
}

func (m *Metrics) observeEnqueueBatch(n int) {
	if m != nil {
		m.enqueueBatch.Observe(float64(n))
	}
}

func (m *Metrics) observeEnqueued(target string, duplicate bool, d time.Duration) {
	if m == nil {
		return
	}
	if duplicate {
		m.duplicates.WithLabelValues(target).Inc()
	} else {
		m.enqueued.WithLabelValues(target).Inc()
	}
	m.enqueueLatency.Observe(d.Seconds())
}

// observeDelivery counts one attempt that delivered n messages (0: it
// failed).
func (m *Metrics) observeDelivery(target string, n int, d time.Duration) {
	if m == nil {
		return
	}
	if n > 0 {
		m.delivered.WithLabelValues(target).Add(float64(n))
	} else {
		m.deliveryErrors.WithLabelValues(target).Inc()
	}
	m.deliveryTime.WithLabelValues(target).Observe(d.Seconds())
}

func (m *Metrics) observeParked(target, reason string) {
	if m != nil {
		m.parkedTotal.WithLabelValues(target, reason).Inc()
	}
}

func (m *Metrics) observeHistorySent(rule string, values int) {
	if m != nil {
		m.historySent.WithLabelValues(rule).Inc()
		m.historyValues.WithLabelValues(rule).Add(float64(values))
	}
}

func (m *Metrics) observeHistoryDropped(reason string, values int) {
	if m != nil {
		m.historyDropped.WithLabelValues(reason).Add(float64(values))
	}
}

// observeHistoryWaiting moves the waiting gauge by delta; forwarders
// replaced by a deploy each take back what they added, so overlapping ones
// add up.
func (m *Metrics) observeHistoryWaiting(delta int) {
	if m != nil && delta != 0 {
		m.historyWaiting.Add(float64(delta))
	}
}

func (m *Metrics) observeRemoveBatch(n int) {
	if m != nil {
		m.removeBatch.Observe(float64(n))
	}
}

// bufferCollector reads pending and parked counts from the FSM at scrape
// time, so the gauges are right on every node, Active or not.
type bufferCollector struct{ reader Reader }

var (
	pendingDesc = prometheus.NewDesc("scadad_sf_pending", "Messages pending delivery, by target.", []string{"target"}, nil)
	parkedDesc  = prometheus.NewDesc("scadad_sf_parked", "Messages parked, by target.", []string{"target"}, nil)
	oldestDesc  = prometheus.NewDesc("scadad_sf_oldest_pending_age_seconds", "Age of the oldest pending message, by target.", []string{"target"}, nil)
)

func (c *bufferCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingDesc
	ch <- parkedDesc
	ch <- oldestDesc
}

func (c *bufferCollector) Collect(ch chan<- prometheus.Metric) {
	stats, err := c.reader.SFStats()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(pendingDesc, errors.Join(errors.New("read s&f stats"), err))
		return
	}
	now := time.Now()
	for name, st := range stats {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(st.Pending), name)
		ch <- prometheus.MustNewConstMetric(parkedDesc, prometheus.GaugeValue, float64(st.Parked), name)
		age := 0.0
		if !st.OldestEnqueue.IsZero() {
			age = now.Sub(st.OldestEnqueue).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age, name)
	}
}
