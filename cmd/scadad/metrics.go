package main

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/scadad/scadad/raftnode"
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
	unconfirmed  prometheus.Gauge
	applyLatency prometheus.Histogram
}

func newNodeMetrics(reg prometheus.Registerer) *nodeMetrics {
	m := &nodeMetrics{
		role:         prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "scadad_role", Help: "1 for the role this node has now, 0 for the others."}, []string{"role"}),
		term:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_raft_term", Help: "Current Raft term."}),
		commitIndex:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_raft_commit_index", Help: "Raft commit index."}),
		appliedIndex: prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_fsm_applied_index", Help: "Last log index applied to the FSM."}),
		clusterEpoch: prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_cluster_epoch", Help: "Cluster epoch (bumped by every availability override)."}),
		lastContact:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_raft_last_contact_seconds", Help: "Time since the leader was last heard from (0 on the leader, -1 unknown)."}),
		unconfirmed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_leader_unconfirmed_seconds",
			Help: "On the leader, time since a quorum last confirmed its leadership (tens of milliseconds while all is well; past half a heartbeat timeout the Active acts on nothing); 0 elsewhere."}),
		applyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "scadad_apply_seconds", Help: "Time from proposing a command on the leader to its FSM result (committed on a quorum and applied).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
	}
	reg.MustRegister(m.role, m.term, m.commitIndex, m.appliedIndex, m.clusterEpoch, m.lastContact, m.unconfirmed, m.applyLatency,
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
		m.unconfirmed.Set(s.unconfirmed.Seconds())
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
	unconfirmed           time.Duration // raftnode.Stats.Unconfirmed
}

// timedNode is the Raft node with its applies timed: every command this
// node commits as leader, its own or forwarded by a follower.
type timedNode struct {
	*raftnode.Node
	hist prometheus.Observer
}

func (t timedNode) Apply(ctx context.Context, cmd []byte) (interface{}, error) {
	start := time.Now()
	out, err := t.Node.Apply(ctx, cmd)
	if err == nil {
		t.hist.Observe(time.Since(start).Seconds())
	}
	return out, err
}

// siteInfo exports scadad_site_info{site} = 1 with the name of the site
// config this node runs ("" until one is deployed): one Prometheus can
// watch many sites, and the shipped alert rules join on it to group by
// site.
type siteInfo struct {
	gauge *prometheus.GaugeVec
	name  string
}

func newSiteInfo(reg prometheus.Registerer) (*siteInfo, error) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "scadad_site_info",
		Help: "1, labelled with the name of the site config this node runs (empty until one is deployed)."}, []string{"site"})
	if err := reg.Register(g); err != nil {
		return nil, fmt.Errorf("register scadad_site_info: %w", err)
	}
	g.WithLabelValues("").Set(1)
	return &siteInfo{gauge: g}, nil
}

// set names the site config now running.
func (s *siteInfo) set(name string) {
	if name == s.name {
		return
	}
	s.gauge.DeleteLabelValues(s.name)
	s.gauge.WithLabelValues(name).Set(1)
	s.name = name
}
