package raftnode

import (
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testwait"
)

// After the override the survivor leads alone: the countdown has ended
// because it overrode, not because the dead peer was heard from, and its
// log must not say the peer was.
func TestOverrideDoesNotLogThePeerHeardFrom(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ModePair, []string{"a", "b"}, "")
	h.start("a")
	h.start("b")
	old := h.waitOneActive(15 * time.Second)
	survivor := "a"
	if old == "a" {
		survivor = "b"
	}
	h.kill(old)
	if got := h.waitOneActive(testOverrideAfter + 15*time.Second); got != survivor {
		t.Fatalf("Active = %s, want %s", got, survivor)
	}
	testwait.For(t, 10*time.Second, "the override complete", func() bool {
		return strings.Contains(h.logs[survivor].String(), "override complete")
	})
	// The wrong line came in the probe round after the override: absence
	// needs a few rounds to show.
	time.Sleep(5 * testProbeInterval)
	logs := h.logs[survivor].String()
	if !strings.Contains(logs, "availability override due") {
		t.Fatalf("no override in the survivor's log:\n%s", logs)
	}
	if strings.Contains(logs, "peer heard from again") {
		t.Fatalf("the survivor says the dead peer was heard from again:\n%s", logs)
	}
}
