package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scadad/scadad/featuregate"
	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/internal/version"
	"github.com/scadad/scadad/raftnode"
)

// gatedNode is the raft node as the control API and the forwarder commit
// through it: timed, and behind the feature gate.
type gatedNode struct {
	timedNode
	gate *featuregate.Gate
}

func (g gatedNode) Apply(ctx context.Context, cmd []byte) (interface{}, error) {
	return g.gate.Apply(ctx, cmd)
}

// raftMembers lists the ids of the raft configuration (voters, the
// witness and any nonvoter): the members the cluster's level is the
// lowest of.
func raftMembers(node *raftnode.Node) func() ([]string, error) {
	return func() ([]string, error) {
		ms, err := node.Members()
		if err != nil {
			return nil, err
		}
		var ids []string
		for _, m := range ms {
			if m.Suffrage != "absent" {
				ids = append(ids, m.ID)
			}
		}
		return ids, nil
	}
}

// stateFeatures is what Status shows of the FSM's feature levels.
type stateFeatures struct{ state *fsm.FSM }

func (s stateFeatures) NodeLevels() ([]fsm.NodeLevel, error) { return s.state.NodeLevels() }
func (stateFeatures) Level() fsm.Level                       { return fsm.FeatureLevel }
func (s stateFeatures) Blocked() string {
	if b := s.state.ApplyBlocked(); b != nil {
		return b.Error()
	}
	return ""
}

// registerBuildInfo exports scadad_build_info (constant 1 with the build
// as labels), this node's FSM feature level, and whether applying
// stopped for want of a newer one.
func registerBuildInfo(reg prometheus.Registerer, info version.Info, state *fsm.FSM) error {
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "scadad_build_info",
		Help: "1, labelled with the running build: version (release, or v<next>-dev+<revision>), revision (VCS commit, empty when unknown), go_version."},
		[]string{"version", "revision", "go_version"})
	build.WithLabelValues(info.Version, info.Revision, info.GoVersion).Set(1)
	level := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "scadad_fsm_feature_level",
		Help: "The highest FSM feature level this build applies."}, func() float64 { return float64(fsm.FeatureLevel) })
	blocked := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "scadad_fsm_apply_blocked",
		Help: "1 when this node stopped applying at an entry that needs a newer FSM feature level (it keeps its raft log, is Detached; upgrade it), else 0."},
		func() float64 {
			if state.ApplyBlocked() != nil {
				return 1
			}
			return 0
		})
	blockedNeeds := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "scadad_fsm_apply_blocked_needs_level",
		Help: "The FSM feature level the entry this node stopped at needs (0 while it applies)."},
		func() float64 {
			if b := state.ApplyBlocked(); b != nil {
				return float64(b.Need)
			}
			return 0
		})
	for _, c := range []prometheus.Collector{build, level, blocked, blockedNeeds} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// raftVoters lists the voters of the raft configuration (the witness
// among them): the members whose digests decide a checkpoint's verdict.
func raftVoters(node *raftnode.Node) func() ([]string, error) {
	return func() ([]string, error) {
		ms, err := node.Members()
		if err != nil {
			return nil, err
		}
		var ids []string
		for _, m := range ms {
			if m.Suffrage == "voter" {
				ids = append(ids, m.ID)
			}
		}
		return ids, nil
	}
}
