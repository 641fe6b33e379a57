package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/scadad/scadad/role"
)

// nodeMetrics are the daemon's own gauges; every package registers its own
// on the same registry.
type nodeMetrics struct {
	role         *prometheus.GaugeVec
	term         prometheus.Gauge
	commitIndex  prometheus.Gauge
	appliedIndex prometheus.Gauge
	clusterEpoch prometheus.Gauge
	lastContact  prometheus.Gauge
}

func newNodeMetrics(reg prometheus.Registerer) *nodeMetrics {
	m := &nodeMetrics{
		role:         prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "scadad_role", Help: "1 for the role this node has now, 0 for the others."}, []string{"role"}),
		term:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_raft_term", Help: "Current Raft term."}),
		commitIndex:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_raft_commit_index", Help: "Raft commit index."}),
		appliedIndex: prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_fsm_applied_index", Help: "Last log index applied to the FSM."}),
		clusterEpoch: prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_cluster_epoch", Help: "Cluster epoch (bumped by every availability override)."}),
		lastContact:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_raft_last_contact_seconds", Help: "Time since the leader was last heard from (0 on the leader, -1 unknown)."}),
	}
	reg.MustRegister(m.role, m.term, m.commitIndex, m.appliedIndex, m.clusterEpoch, m.lastContact,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// sampleEvery refreshes the gauges from the node until ctx ends.
func (m *nodeMetrics) sampleEvery(ctx context.Context, d time.Duration, sample func() (role.State, statsSample)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		st, s := sample()
		for _, r := range []role.Role{role.Detached, role.Standby, role.Witness, role.Active} {
			v := 0.0
			if st.Role == r {
				v = 1
			}
			m.role.WithLabelValues(r.String()).Set(v)
		}
		m.term.Set(float64(s.term))
		m.commitIndex.Set(float64(s.commit))
		m.appliedIndex.Set(float64(s.applied))
		m.clusterEpoch.Set(float64(st.Epoch.Cluster))
		if s.lastContact < 0 {
			m.lastContact.Set(-1)
		} else {
			m.lastContact.Set(s.lastContact.Seconds())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

type statsSample struct {
	term, commit, applied uint64
	lastContact           time.Duration
}
