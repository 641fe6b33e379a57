package fsm

import (
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/scadad/scadad/fsm/fsmpb"
)

// recordFeatures stores a node's feature level and release. A change of
// level is audited: it is what lets the cluster's level rise (or fall,
// when a node is downgraded).
func (a *applier) recordFeatures(c *fsmpb.RecordFeatures, res *Result) error {
	if e := firstErr(checkID("node id", c.NodeId), checkText("version", c.Version, MaxIDBytes)); e != nil {
		res.Err = e
		return nil
	}
	if c.Level == 0 {
		res.Err = cmdErr(CodeInvalid, "feature level 0 for node %s (levels start at 1)", c.NodeId)
		return nil
	}
	var prev fsmpb.NodeFeatures
	had, err := getRecord(a.features, []byte(c.NodeId), &prev)
	if err != nil {
		return err
	}
	rec := &fsmpb.NodeFeatures{Level: c.Level, Version: c.Version, LogIndex: a.index}
	if err := a.putRecord(a.features, []byte(c.NodeId), rec); err != nil {
		return fmt.Errorf("store feature level of node %s: %w", c.NodeId, err)
	}
	if had && prev.Level == c.Level {
		return nil
	}
	from := "none"
	if had {
		from = fmt.Sprintf("%d (%s)", prev.Level, prev.Version)
	}
	_, err = a.writeAudit("feature_level", fmt.Sprintf("node %s FSM feature level %s -> %d (%s)", c.NodeId, from, c.Level, c.Version))
	return err
}

// NodeLevel is one node's recorded feature level.
type NodeLevel struct {
	NodeID  string
	Level   Level
	Version string
}

// NodeLevels returns the recorded feature levels in node id order. A node
// without a record (one that runs a release before v0.2.0, or has not
// recorded yet) is absent.
func (f *FSM) NodeLevels() ([]NodeLevel, error) {
	var out []NodeLevel
	err := f.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketFeatures)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var rec fsmpb.NodeFeatures
			if err := unmarshalStored(v, &rec); err != nil {
				return err
			}
			out = append(out, NodeLevel{NodeID: string(k), Level: Level(rec.Level), Version: rec.Version})
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read feature levels: %w", err)
	}
	return out, nil
}

// ClusterLevel is the lowest feature level among members (a member
// without a record counts as level 1) and the member that has it (the
// first in members' order among those at that level; "" for no members).
func ClusterLevel(records []NodeLevel, members []string) (Level, NodeLevel) {
	byID := make(map[string]NodeLevel, len(records))
	for _, r := range records {
		byID[r.NodeID] = r
	}
	var low NodeLevel
	for i, m := range members {
		r, ok := byID[m]
		if !ok {
			r = NodeLevel{NodeID: m, Level: 1}
		}
		if i == 0 || r.Level < low.Level {
			low = r
		}
	}
	return low.Level, low
}

// LevelRelease names the first release that applies level l.
func LevelRelease(l Level) string { return levelRelease(l) }
