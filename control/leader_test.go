package control

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/role"
)

// trail is an audit trail that the auditor appends to and the reader reads
// back, as the FSM would after the entry commits.
type trail struct {
	mu      sync.Mutex
	entries []fsm.AuditEntry
	fail    int // refuse this many audits first
}

func (t *trail) AuditNewestFirst(fn func(fsm.AuditEntry) bool) error {
	t.mu.Lock()
	es := append([]fsm.AuditEntry(nil), t.entries...)
	t.mu.Unlock()
	for i := len(es) - 1; i >= 0; i-- {
		if !fn(es[i]) {
			return nil
		}
	}
	return nil
}

func (t *trail) Audit(_ context.Context, actor, kind, detail string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fail > 0 {
		t.fail--
		return errors.New("not the leader")
	}
	t.entries = append(t.entries, fsm.AuditEntry{Seq: uint64(len(t.entries) + 1), At: time.Now(), Actor: actor, Kind: kind, Detail: detail})
	return nil
}

func (t *trail) elected() []fsm.AuditEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []fsm.AuditEntry
	for _, e := range t.entries {
		if e.Kind == KindLeaderElected {
			out = append(out, e)
		}
	}
	return out
}

func TestLeaderElectedDetailRoundTrips(t *testing.T) {
	for _, c := range []LeaderElected{{Term: 7, Previous: "node-a", Cause: CauseLostContact}, {Term: 2, Cause: CauseFirst}} {
		got, ok := ParseLeaderElected(LeaderElectedDetail(c.Term, c.Previous, c.Cause))
		if !ok || got != c {
			t.Errorf("round trip of %+v gave %+v (ok %v)", c, got, ok)
		}
	}
	if _, ok := ParseLeaderElected("requested from a to b"); ok {
		t.Error("a failover detail parsed as leader.elected")
	}
}

func TestLeaderAuditNamesPreviousLeaderAndCause(t *testing.T) {
	now := time.Now()
	cases := []struct {
		name   string
		before []fsm.AuditEntry
		want   LeaderElected
	}{
		{"first", nil, LeaderElected{Term: 5, Cause: CauseFirst}},
		{"crash", []fsm.AuditEntry{
			{Kind: KindLeaderElected, Actor: "node-a", Detail: LeaderElectedDetail(4, "", CauseFirst)},
			{Kind: "deploy", Actor: "operator", Detail: "revision 2"},
		}, LeaderElected{Term: 5, Previous: "node-a", Cause: CauseLostContact}},
		{"planned", []fsm.AuditEntry{
			{Kind: KindLeaderElected, Actor: "node-a", Detail: LeaderElectedDetail(4, "", CauseFirst)},
			{Kind: "failover", Actor: "operator@node-a", Detail: "requested from node-a to \"\"", At: now.Add(-time.Second)},
		}, LeaderElected{Term: 5, Previous: "node-a", Cause: CausePlanned}},
		{"stale failover request", []fsm.AuditEntry{
			{Kind: KindLeaderElected, Actor: "node-a", Detail: LeaderElectedDetail(4, "", CauseFirst)},
			{Kind: "failover", Actor: "operator@node-a", Detail: "requested from node-a to \"\"", At: now.Add(-time.Hour)},
		}, LeaderElected{Term: 5, Previous: "node-a", Cause: CauseLostContact}},
		{"override", []fsm.AuditEntry{
			{Kind: KindLeaderElected, Actor: "node-a", Detail: LeaderElectedDetail(4, "", CauseFirst)},
			{Kind: "override", Actor: "node-b", Detail: "cluster epoch 1 -> 2 by node node-b: availability override"},
		}, LeaderElected{Term: 5, Previous: "node-a", Cause: CauseOverride}},
		{"heal", []fsm.AuditEntry{
			{Kind: KindLeaderElected, Actor: "node-a", Detail: LeaderElectedDetail(4, "", CauseFirst)},
			{Kind: "heal.merged", Actor: "heal@node-b", Detail: "merged"},
		}, LeaderElected{Term: 5, Previous: "node-a", Cause: CauseHeal}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := &trail{entries: append([]fsm.AuditEntry(nil), c.before...)}
				want := len(tr.elected()) + 1
				roles := role.NewBroadcaster(role.State{Role: role.Standby, NodeID: "node-b"})
				l := &LeaderAudit{NodeID: "node-b", Roles: roles, State: tr, Audit: tr, Log: zerolog.Nop(), Now: func() time.Time { return now }, Retry: 10 * time.Millisecond}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go func() { _ = l.Run(ctx) }()
				roles.Publish(role.State{Role: role.Active, NodeID: "node-b", Leader: "node-b", Epoch: role.Epoch{Cluster: 1, Term: 5}})
				got := electedAfter(t, tr, want)
				e := got[len(got)-1]
				le, ok := ParseLeaderElected(e.Detail)
				if !ok || e.Actor != "node-b" || le != c.want {
					t.Fatalf("entry %+v (parsed %+v), want actor node-b and %+v", e, le, c.want)
				}
			})
		})
	}
}

func TestLeaderAuditOncePerTermAndRetries(t *testing.T) {
	// In a synctest bubble: the retries wait on the bubble's clock.
	synctest.Test(t, func(t *testing.T) {
		tr := &trail{fail: 2}
		roles := role.NewBroadcaster(role.State{Role: role.Standby, NodeID: "node-b"})
		l := &LeaderAudit{NodeID: "node-b", Roles: roles, State: tr, Audit: tr, Log: zerolog.Nop(), Now: time.Now, Retry: 10 * time.Millisecond}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _ = l.Run(ctx) }()
		active := role.State{Role: role.Active, NodeID: "node-b", Leader: "node-b", Epoch: role.Epoch{Cluster: 1, Term: 3}}
		roles.Publish(active)
		electedAfter(t, tr, 1) // after two refusals
		// The same term published again (a voter count change) adds nothing.
		active.Voters = 2
		roles.Publish(active)
		if n := len(electedAfter(t, tr, 1)); n != 1 {
			t.Fatalf("%d leader.elected entries for one term", n)
		}
		// A restarted LeaderAudit (a new process) finds the entry already there.
		l2 := &LeaderAudit{NodeID: "node-b", Roles: roles, State: tr, Audit: tr, Log: zerolog.Nop(), Now: time.Now}
		if recorded, err := l2.record(ctx, 3); err != nil || !recorded {
			t.Fatalf("record of an already recorded term: %v, %v", recorded, err)
		}
		if n := len(tr.elected()); n != 1 {
			t.Fatalf("%d leader.elected entries after a restart in the same term", n)
		}
		// A new term is recorded with this node as the previous leader.
		active.Epoch.Term = 4
		roles.Publish(active)
		got := electedAfter(t, tr, 2)
		if le, _ := ParseLeaderElected(got[1].Detail); le.Term != 4 || le.Previous != "node-b" || le.Cause != CauseLostContact {
			t.Fatalf("second entry %q", got[1].Detail)
		}
	})
}

// electedAfter lets a second pass in the test's synctest bubble (every
// retry falls due within it) and returns the leader.elected entries once
// every goroutine of the bubble waits; fewer than n fail the test.
func electedAfter(t *testing.T, tr *trail, n int) []fsm.AuditEntry {
	t.Helper()
	time.Sleep(time.Second)
	synctest.Wait()
	got := tr.elected()
	if len(got) < n {
		t.Fatalf("%d leader.elected entries, want %d: %+v", len(got), n, tr.entries)
	}
	return got
}
