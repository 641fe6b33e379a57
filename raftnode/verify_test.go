package raftnode

import (
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testwait"
)

func TestActiveFreshOnlyOnAVerifiedLeader(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ModeWitness, []string{"a", "b", "w"}, "w")
	for _, id := range []string{"a", "b", "w"} {
		h.start(id)
	}
	leader := h.waitOneActive(15 * time.Second)
	testwait.ForDetail(t, 5*time.Second, "the leader verified by a quorum", func() (bool, string) {
		return h.node(leader).ActiveFresh(300 * time.Millisecond), ""
	})

	for _, id := range []string{"a", "b", "w"} {
		if id != leader && h.node(id).ActiveFresh(time.Hour) {
			t.Fatalf("follower %s reports a fresh leadership", id)
		}
	}
	// A zero window can never be met: the check is a real comparison.
	if h.node(leader).ActiveFresh(0) {
		t.Fatal("ActiveFresh(0) is true")
	}
}
