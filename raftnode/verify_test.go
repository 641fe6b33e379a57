package raftnode

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/role"
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

// Acting shows the leader as Active only while ActiveFresh holds, and
// every other role as the stream has it.
func TestActingIsActiveOnlyWhileFresh(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ModeWitness, []string{"a", "b", "w"}, "w")
	for _, id := range []string{"a", "b", "w"} {
		h.start(id)
	}
	leader := h.waitOneActive(15 * time.Second)
	testwait.For(t, 5*time.Second, "the leader Active through Acting", func() bool {
		return h.node(leader).Acting(300*time.Millisecond).Current().Role == role.Active
	})
	// A window no confirmation can meet: the leader acts on nothing.
	if st := h.node(leader).Acting(0).Current(); st.Role != role.Detached || !st.Unconfirmed || !st.Leading() {
		t.Fatalf("Acting(0) on the leader: %+v, want detached, unconfirmed, still leading", st)
	}
	for _, id := range []string{"a", "b"} {
		if id != leader {
			if got, want := h.node(id).Acting(time.Hour).Current().Role, h.node(id).Role().Current().Role; got != want {
				t.Fatalf("Acting on follower %s: %v, want the stream's %v", id, got, want)
			}
			if st := h.node(id).Acting(0).Current(); st.Unconfirmed || st.Leading() {
				t.Fatalf("Acting(0) on follower %s: %+v, want neither unconfirmed nor leading", id, st)
			}
		}
	}
}

// A leader whose state machine falls behind far enough to hold raft's
// leader loop gets no quorum confirmation, and so acts on nothing; it says
// so, with what raft is waiting for, and says when it acts again.
func TestALeaderWithoutConfirmationSaysSoAndWhy(t *testing.T) {
	t.Parallel()
	h, leader := threeNodes(t)
	release := h.holdApplies(leader)
	node := h.node(leader)
	// Every apply started here ends before the test does: the harness's
	// cleanup stops the nodes, and none may be used after that.
	var applies sync.WaitGroup
	defer applies.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// More commits than raft's queue to the state machine holds (128
	// batches), one at a time so each is a batch of its own.
	stop := make(chan struct{})
	defer close(stop)
	applies.Add(1)
	go func() {
		defer applies.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			applies.Add(1)
			go func() {
				defer applies.Done()
				_, _ = node.Apply(ctx, []byte(fmt.Sprint("v", i)))
			}()
		}
	}()
	testwait.ForDetail(t, 15*time.Second, "the leader's warning", func() (bool, string) {
		return strings.Contains(h.logs[leader].String(), "leadership not confirmed by a quorum"), ""
	})
	if logs := h.logs[leader].String(); !strings.Contains(logs, `"fsm_pending":"128"`) {
		t.Fatalf("the warning does not show the state machine's full queue:\n%s", lastLines(logs, 5))
	}
	if u := h.node(leader).Stats().Unconfirmed; u < lateConfirmationWarn {
		t.Fatalf("Stats().Unconfirmed = %s after the warning, want at least %s", u, lateConfirmationWarn)
	}
	for id := range h.running() {
		if u := h.node(id).Stats().Unconfirmed; id != leader && u != 0 {
			t.Fatalf("follower %s: Stats().Unconfirmed = %s, want 0", id, u)
		}
	}
	release()
	testwait.For(t, 15*time.Second, "the leader confirmed again", func() bool {
		return strings.Contains(h.logs[leader].String(), "leadership confirmed by a quorum again")
	})
	testwait.ForDetail(t, 5*time.Second, "Stats().Unconfirmed back under a second", func() (bool, string) {
		u := h.node(leader).Stats().Unconfirmed
		return u < time.Second, u.String()
	})
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
