package alarms

import (
	"context"
	"testing"
	"time"

	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/gateway"
	"github.com/scadad/scadad/internal/clock/clocktest"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/role"
)

func shelved(t *testing.T, rig *svcRig, id string) *fsmpb.AlarmRecord {
	t.Helper()
	rec, ok, err := rig.f.Alarm(id)
	if err != nil || !ok {
		t.Fatalf("alarm %s: %v %v", id, ok, err)
	}
	return rec
}

// A timed shelve ends by itself: the Active proposes the unshelve when
// the end passes (a replicated transition, by ShelveExpiryOperator); a
// Standby proposes nothing, and a node that becomes Active ends what is
// due; a shelve renewed meanwhile is not ended by the old end.
func TestTimedShelveEndsOnTheActive(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	clk := clocktest.New(t0)
	f := newFSM(t)
	r := &localRaft{f: f}
	standby := role.State{Role: role.Standby, Voters: 2, Epoch: active.Epoch}
	roles := role.NewBroadcaster(active)
	rig := startService(t, f, r, roles, &memQueue{ids: map[string]int{}}, func(o *Options) { o.Clock = clk })
	mustSnapshot(t, rig.svc, "mx1", "Z28061", []gateway.Alarm{alarm("A1", true, false, 1), alarm("A2", true, false, 1)})
	ctx := context.Background()
	for _, id := range []string{"A1", "A2"} {
		if err := rig.svc.Shelve(ctx, id, "alice", true, t0.Add(time.Hour), "maintenance"); err != nil {
			t.Fatal(err)
		}
	}
	// Before the end: still shelved.
	testwait.For(t, 5*time.Second, "the expiry timer armed", func() bool { return clk.Waiting() >= 1 })
	clk.Advance(59 * time.Minute)
	if !shelved(t, rig, "A1").Shelved {
		t.Fatal("A1 unshelved before its end")
	}
	// A1 is shelved again, for longer: the end of its first shelve must
	// not end the second. (What the expiry would propose, had it read
	// the state before the renewal.)
	if err := rig.svc.Shelve(ctx, "A1", "bob", true, t0.Add(3*time.Hour), "longer"); err != nil {
		t.Fatal(err)
	}
	if _, err := rig.svc.commit(ctx, &fsmpb.Command{Body: &fsmpb.Command_AlarmShelve{AlarmShelve: &fsmpb.AlarmShelve{
		AlarmId: "A1", Operator: ShelveExpiryOperator, UntilUnixNano: t0.Add(time.Hour).UnixNano()}}}); err != nil {
		t.Fatal(err)
	}
	if rec := shelved(t, rig, "A1"); !rec.Shelved || rec.ShelvedBy != "bob" {
		t.Fatalf("A1 after a stale expiry: shelved %v by %q, want still shelved by bob", rec.Shelved, rec.ShelvedBy)
	}

	// A Standby lets the end pass without proposing.
	roles.Publish(standby)
	testwait.For(t, 5*time.Second, "the Standby's recheck armed", func() bool { return clk.Waiting() >= 1 })
	clk.Advance(2 * time.Minute)
	testwait.For(t, 5*time.Second, "the Standby's recheck armed again", func() bool { return clk.Waiting() >= 1 })
	if !shelved(t, rig, "A2").Shelved {
		t.Fatal("a Standby ended a shelve")
	}
	// Active again: A2's end has passed, it is unshelved by the Active.
	roles.Publish(active)
	clk.Advance(shelveRecheck)
	testwait.For(t, 5*time.Second, "A2 unshelved after its end", func() bool { return !shelved(t, rig, "A2").Shelved })
	log, err := f.AlarmLogAfter(0, 100)
	if err != nil {
		t.Fatal(err)
	}
	last := log[len(log)-1]
	if last.AlarmId != "A2" || last.Kind != "unshelved" || last.Operator != ShelveExpiryOperator {
		t.Fatalf("last transition %s %s by %s, want A2 unshelved by %s", last.AlarmId, last.Kind, last.Operator, ShelveExpiryOperator)
	}
	if !shelved(t, rig, "A1").Shelved {
		t.Fatal("A1, shelved until later, was unshelved")
	}
	// A1's second end.
	clk.Advance(2 * time.Hour)
	testwait.For(t, 5*time.Second, "A1 unshelved after its second end", func() bool { return !shelved(t, rig, "A1").Shelved })
}
