package opcua

import (
	"testing"
	"time"

	"github.com/scadad/scadad/internal/clock/clocktest"
	"github.com/scadad/scadad/role"
)

func TestComputeServiceLevel(t *testing.T) {
	healthy := func(r role.Role) Health {
		return Health{Role: r, QuorumContact: true, DataFresh: true, PeerReachesMe: ReachOK}
	}
	with := func(h Health, f func(*Health)) Health { f(&h); return h }
	tests := []struct {
		name string
		h    Health
		want byte
	}{
		{"healthy active", healthy(role.Active), LevelActive},
		{"healthy standby", healthy(role.Standby), LevelStandby},
		{"active, peer verdict unknown gets the benefit of the doubt", with(healthy(role.Active), func(h *Health) { h.PeerReachesMe = ReachUnknown }), LevelActive},
		{"standby, peer verdict unknown", with(healthy(role.Standby), func(h *Health) { h.PeerReachesMe = ReachUnknown }), LevelStandby},
		{"detached", healthy(role.Detached), LevelDown},
		{"witness", healthy(role.Witness), LevelDown},
		{"unknown role value", healthy(role.Role(42)), LevelDown},
		{"active shutting down", with(healthy(role.Active), func(h *Health) { h.ShuttingDown = true }), LevelDown},
		{"active, stale data", with(healthy(role.Active), func(h *Health) { h.DataFresh = false }), LevelDegraded},
		{"standby, stale data", with(healthy(role.Standby), func(h *Health) { h.DataFresh = false }), LevelDegraded},
		{"active, no quorum contact", with(healthy(role.Active), func(h *Health) { h.QuorumContact = false }), LevelDegraded},
		{"active, peer cannot reach me", with(healthy(role.Active), func(h *Health) { h.PeerReachesMe = ReachFailed }), LevelDegraded},
		{"standby, peer cannot reach me", with(healthy(role.Standby), func(h *Health) { h.PeerReachesMe = ReachFailed }), LevelDegraded},
		{"active, no quorum and stale", with(healthy(role.Active), func(h *Health) { h.QuorumContact, h.DataFresh = false, false }), LevelCritical},
		{"standby, no quorum and stale", with(healthy(role.Standby), func(h *Health) { h.QuorumContact, h.DataFresh = false, false }), LevelCritical},
		{"detached beats every other input", Health{Role: role.Detached}, LevelDown},
		{"electing after service, data fresh", Health{Role: role.Detached, Electing: true, DataFresh: true}, LevelDegraded},
		{"electing after service, stale data", Health{Role: role.Detached, Electing: true}, LevelCritical},
		{"electing, shutting down", Health{Role: role.Detached, Electing: true, DataFresh: true, ShuttingDown: true}, LevelDown},
		{"witness electing", Health{Role: role.Witness, Electing: true, DataFresh: true}, LevelDown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ComputeServiceLevel(tt.h); got != tt.want {
				t.Errorf("ComputeServiceLevel(%+v) = %d, want %d", tt.h, got, tt.want)
			}
		})
	}
}

// The active node must beat a healthy standby in every pairing where both
// are healthy, or clients picking the highest level would pick the standby.
func TestServiceLevelOrdering(t *testing.T) {
	if !(LevelActive > LevelStandby && LevelStandby > LevelDegraded && LevelDegraded > LevelCritical && LevelCritical > LevelDown) {
		t.Fatalf("tiers out of order: %d %d %d %d %d", LevelActive, LevelStandby, LevelDegraded, LevelCritical, LevelDown)
	}
	if LevelActive == 255 || LevelStandby == 255 {
		t.Fatal("a tier equals the SDK default 255; a never-published level would be indistinguishable")
	}
}

func TestEffectivePeerReach(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ttl := 30 * time.Second
	tests := []struct {
		name      string
		ok, known bool
		at        time.Time
		want      PeerReach
	}{
		{"never heard", false, false, time.Time{}, ReachUnknown},
		{"recent ok", true, true, now.Add(-time.Second), ReachOK},
		{"recent failure", false, true, now.Add(-time.Second), ReachFailed},
		{"failure exactly at ttl still counts", false, true, now.Add(-ttl), ReachFailed},
		{"expired failure", false, true, now.Add(-ttl - time.Millisecond), ReachUnknown},
		{"expired ok", true, true, now.Add(-time.Hour), ReachUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := EffectivePeerReach(tt.ok, tt.known, tt.at, now, ttl); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// A node goes 240 -> 200 -> 250 through an election it entered from
// service, not 240 -> 0 -> 250; one that never served (a boot without a
// quorum) stays at 0, and so does one whose election outlasts the grace.
func TestServiceLevelThroughAnElection(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	s := &Server{cfg: Config{ElectionGrace: 10 * time.Second}, clock: clk, dataFresh: true}
	step := func(st role.State) byte {
		s.mu.Lock()
		s.followElection(s.state, st)
		s.state = st
		s.mu.Unlock()
		return ComputeServiceLevel(s.health())
	}
	booting := role.State{Role: role.Detached, Electing: true}
	if lvl := step(booting); lvl != LevelDown {
		t.Fatalf("a booting node without a leader: %d, want 0", lvl)
	}
	if lvl := step(role.State{Role: role.Standby, Leader: "a"}); lvl != LevelStandby {
		t.Fatalf("standby: %d", lvl)
	}
	if lvl := step(booting); lvl != LevelDegraded {
		t.Fatalf("the standby in an election: %d, want %d", lvl, LevelDegraded)
	}
	clk.Advance(9 * time.Second)
	if lvl := step(role.State{Role: role.Detached, Electing: true, Leader: "b"}); lvl != LevelDegraded {
		t.Fatalf("still electing after 9 s: %d, want %d", lvl, LevelDegraded)
	}
	clk.Advance(2 * time.Second)
	if lvl := ComputeServiceLevel(s.health()); lvl != LevelDown {
		t.Fatalf("electing beyond the grace: %d, want 0", lvl)
	}
	if lvl := step(role.State{Role: role.Active, Leader: "b"}); lvl != LevelActive {
		t.Fatalf("active: %d", lvl)
	}
	if lvl := step(role.State{Role: role.Detached}); lvl != LevelDown {
		t.Fatalf("detached, not electing (raft down, shutdown): %d, want 0", lvl)
	}
}
