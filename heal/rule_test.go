package heal

import "testing"

func TestDecide(t *testing.T) {
	tests := []struct {
		name   string
		a, b   Facts
		winner string
	}{
		{"earlier override wins", Facts{NodeID: "node-a", OverrideUnixNano: 200}, Facts{NodeID: "node-b", OverrideUnixNano: 100}, "node-b"},
		{"no override record wins", Facts{NodeID: "node-b", OverrideUnixNano: 0}, Facts{NodeID: "node-a", OverrideUnixNano: 5}, "node-b"},
		{"tie: smaller id", Facts{NodeID: "node-b", OverrideUnixNano: 7}, Facts{NodeID: "node-a", OverrideUnixNano: 7}, "node-a"},
		{"preferred agreed", Facts{NodeID: "node-a", OverrideUnixNano: 1, Preferred: "node-b"}, Facts{NodeID: "node-b", OverrideUnixNano: 9, Preferred: "node-b"}, "node-b"},
		{"preferred disagreeing is ignored", Facts{NodeID: "node-a", OverrideUnixNano: 1, Preferred: "node-b"}, Facts{NodeID: "node-b", OverrideUnixNano: 9, Preferred: "node-a"}, "node-a"},
		{"preferred names neither", Facts{NodeID: "node-a", OverrideUnixNano: 9, Preferred: "x"}, Facts{NodeID: "node-b", OverrideUnixNano: 1, Preferred: "x"}, "node-b"},
		{"preferred on one side only", Facts{NodeID: "node-a", OverrideUnixNano: 9, Preferred: "node-a"}, Facts{NodeID: "node-b", OverrideUnixNano: 1}, "node-b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v1, v2 := Decide(tc.a, tc.b), Decide(tc.b, tc.a)
			if v1.Winner != tc.winner || v2.Winner != tc.winner {
				t.Fatalf("winner %q / %q (reasons %q, %q), want %q", v1.Winner, v2.Winner, v1.Reason, v2.Reason, tc.winner)
			}
			if v1.Loser == v1.Winner || v1.Reason == "" {
				t.Fatalf("verdict %+v", v1)
			}
		})
	}
}
