package raftnode

import "testing"

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
