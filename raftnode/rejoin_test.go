package raftnode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/role"
)

// splitPair starts a pair behind proxies, cuts the link until both sides
// overrode (dual-active) and heals the link again.
func splitPair(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t, ModePair, []string{"a", "b"}, "")
	proxies := map[string]*proxy{}
	binds := reservePorts(t, len(h.members))
	for i, m := range h.members {
		h.bind[m.ID] = binds[i]
		proxies[m.ID] = newProxy(t, m.RaftAddr, h.bind[m.ID])
	}
	h.start("a")
	h.start("b")
	h.waitOneActive(15 * time.Second)
	for _, p := range proxies {
		p.block(true)
	}
	testwait.ForDetail(t, testOverrideAfter+15*time.Second, "both sides to override", func() (bool, string) {
		r := h.roles()
		return r["a"].Role == role.Active && r["b"].Role == role.Active && r["a"].Voters == 1 && r["b"].Voters == 1, stateString(r)
	})

	for _, p := range proxies {
		p.block(false)
	}
	return h
}

// TestFenceUnfenceAndRejoin walks the loser's side of a heal on a real
// split: fenced it is Detached, commits nothing and is not re-added (its
// probe answer names no voters); unfenced it is its own Active cluster
// again; fenced and restarted it stays fenced; Rejoin ends the fence as
// Standby of the winner's cluster.
func TestFenceUnfenceAndRejoin(t *testing.T) {
	t.Parallel()
	h := splitPair(t)
	h.apply("b", "b-split")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if err := h.node("b").Fence(ctx, "test"); err != nil {
		t.Fatalf("fence: %v", err)
	}
	if st := h.node("b").Role().Current(); st.Role != role.Detached {
		t.Fatalf("fenced b is %v, want detached at once", st.Role)
	}
	if !h.node("b").Fenced() {
		t.Fatal("Fenced() is false after Fence")
	}
	_, err := h.node("b").Apply(ctx, []byte("after-fence"))
	if !errors.Is(err, ErrNotLeader) || !errors.Is(err, errFenced) {
		t.Fatalf("apply on a fenced node: %v, want a fenced not-leader error", err)
	}
	if err := h.node("b").ManualOverride(ctx, true); err == nil {
		t.Fatal("a manual override ran on a fenced node")
	}
	// The winner must not re-add a fenced node: it is still holding its
	// own history. Give the winner's guard loop many probe rounds.
	deadline := time.Now().Add(20 * testProbeInterval)
	for time.Now().Before(deadline) {
		if st := h.node("a").Role().Current(); st.Voters != 1 {
			t.Fatalf("winner re-added a fenced node: %+v", st)
		}
		time.Sleep(testProbeInterval / 2)
	}

	if err := h.node("b").Unfence(ctx); err != nil {
		t.Fatalf("unfence: %v", err)
	}
	testwait.ForDetail(t, 15*time.Second, "b Active on its own cluster again", func() (bool, string) {
		r := h.roles()
		return r["b"].Role == role.Active && r["b"].Voters == 1, stateString(r)
	})

	if !slices.Contains(h.fsms["b"].Values(), "b-split") {
		t.Fatal("unfence lost b's own history")
	}

	// Fence, crash and restart fenced: raft must not run.
	if err := h.node("b").Fence(ctx, "test again"); err != nil {
		t.Fatalf("fence: %v", err)
	}
	h.kill("b")
	h.tweak = func(c *Config) { c.StartFenced = c.NodeID == "b" }
	h.start("b")
	h.tweak = nil
	deadline = time.Now().Add(3 * testOverrideAfter)
	for time.Now().Before(deadline) {
		if st := h.node("b").Role().Current(); st.Role != role.Detached || !h.node("b").Fenced() {
			t.Fatalf("b restarted fenced but is %+v (fenced=%v)", st, h.node("b").Fenced())
		}
		time.Sleep(testProbeInterval)
	}

	if err := h.node("b").Rejoin(ctx, func(context.Context) error { h.fsms["b"].reset(); return nil }); err != nil {
		t.Fatalf("rejoin: %v", err)
	}
	if h.node("b").Fenced() {
		t.Fatal("still fenced after Rejoin")
	}
	testwait.ForDetail(t, 20*time.Second, "b Standby of a's cluster", func() (bool, string) {
		r := h.roles()
		return r["a"].Role == role.Active && r["b"].Role == role.Standby && r["a"].Voters == 2, stateString(r)
	})

	testwait.ForDetail(t, 5*time.Second, "b holds a's history", func() (bool, string) {
		a, b := h.fsms["a"].Values(), h.fsms["b"].Values()
		return slices.Equal(a, b) && !slices.Contains(b, "b-split"), fmt.Sprintf("a=%v b=%v", a, b)
	})

}
