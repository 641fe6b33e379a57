package deploy

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics says where this node's site configuration stands against the
// deployed one: a node that cannot apply a deploy keeps running the last
// good revision, and without these an operator heard of it only by asking
// (scadactl deploy status).
type Metrics struct {
	running  prometheus.Gauge
	deployed prometheus.Gauge
	failing  prometheus.Gauge
}

// NewMetrics registers the gauges on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "scadad_site_config_revision",
			Help: "The site configuration revision this node runs (0: none).",
		}),
		deployed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "scadad_site_config_deployed_revision",
			Help: "The revision the cluster's deployment pointer names (0: nothing deployed).",
		}),
		failing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "scadad_site_config_apply_failing",
			Help: "1 while this node cannot apply the deployed revision and runs the last good one (scadactl deploy status says why).",
		}),
	}
	for _, c := range []prometheus.Collector{m.running, m.deployed, m.failing} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register deploy metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) observe(running, deployed uint64, failing bool) {
	if m == nil {
		return
	}
	m.running.Set(float64(running))
	m.deployed.Set(float64(deployed))
	f := 0.0
	if failing {
		f = 1
	}
	m.failing.Set(f)
}
