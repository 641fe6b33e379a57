package raftnode

import "testing"

func TestBehind(t *testing.T) {
	cases := []struct {
		index, term, ourIndex, ourTerm uint64
		want                           bool
	}{
		{10, 3, 12, 3, true},  // same term, shorter
		{12, 3, 12, 3, false}, // equal
		{14, 3, 12, 3, false}, // longer
		{20, 2, 12, 3, true},  // older last term, however long
		{5, 4, 12, 3, false},  // newer last term, however short
	}
	for _, c := range cases {
		if got := behind(c.index, c.term, c.ourIndex, c.ourTerm); got != c.want {
			t.Errorf("behind(%d@%d vs ours %d@%d) = %v, want %v", c.index, c.term, c.ourIndex, c.ourTerm, got, c.want)
		}
	}
}
