package raftnode

import (
	"testing"
	"time"
)

func TestNextEpochIsAboveAndDistinctPerNode(t *testing.T) {
	pair := []Member{{ID: "node-b"}, {ID: "node-a"}}
	tests := []struct {
		current uint64
		self    string
		want    uint64
	}{
		{0, "node-a", 2},
		{0, "node-b", 1},
		{1, "node-a", 2},
		{1, "node-b", 3},
		{2, "node-a", 4},
		{2, "node-b", 3},
		{7, "node-a", 8},
		{7, "node-b", 9},
	}
	for _, tt := range tests {
		if got := nextEpoch(tt.current, pair, tt.self); got != tt.want {
			t.Errorf("nextEpoch(%d, %s) = %d, want %d", tt.current, tt.self, got, tt.want)
		}
	}
	// Whatever the shared starting epoch, the two sides never collide and
	// both move forward.
	for cur := uint64(0); cur < 50; cur++ {
		a, b := nextEpoch(cur, pair, "node-a"), nextEpoch(cur, pair, "node-b")
		if a == b || a <= cur || b <= cur {
			t.Fatalf("from %d: node-a %d, node-b %d", cur, a, b)
		}
	}
	if got := nextEpoch(5, []Member{{ID: "solo"}}, "solo"); got != 6 {
		t.Fatalf("single member: %d, want 6", got)
	}
}

// TestRestartedNodePublishesItsEpochFromTheStart: a node whose state holds
// cluster epoch 4 publishes 4 from its very first state, not 0 until the
// role loop's first evaluation. The daemon's scadad_cluster_epoch read 0
// for the first second after every restart of a site that had overridden,
// and ScadadEpochRaised (changes() over 15 minutes) fired for a restart.
func TestRestartedNodePublishesItsEpochFromTheStart(t *testing.T) {
	h := newHarness(t, ModePair, []string{"a", "b"}, "")
	f := h.fsms["a"]
	f.mu.Lock()
	f.epoch = 4
	f.showLocked()
	f.mu.Unlock()
	// No periodic re-evaluation during the check: only raft's own
	// observations could publish before it.
	h.tweak = func(c *Config) { c.RoleInterval = time.Hour }
	n := h.start("a")
	if got := n.Role().Current(); got.Epoch.Cluster != 4 {
		t.Fatalf("first published state %+v: cluster epoch %d, want 4 (the state's)", got, got.Epoch.Cluster)
	}
}
