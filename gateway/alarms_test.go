package gateway_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/gateway"
	"github.com/scadad/scadad/gateway/sim"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/role"
)

// AlarmChange makes the recorder a gateway.AlarmHandler.
func (r *recorder) AlarmChange(a gateway.Alarm) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.alarms = append(r.alarms, a)
}

func (r *recorder) alarmSeen(pred func(gateway.Alarm) bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.alarms {
		if pred(a) {
			return true
		}
	}
	return false
}

func withoutAlarmCaps() []string {
	var out []string
	for _, c := range sim.NewCapabilities() {
		if c != gateway.CapStreamActiveAlarms && c != gateway.CapUnaryAcknowledgeAlarm {
			out = append(out, c)
		}
	}
	return out
}

func TestAlarmCallsNeedTheirCapabilities(t *testing.T) {
	r := startRig(t, sim.Config{Capabilities: withoutAlarmCaps()}, gateway.Config{})
	ctx := context.Background()
	if _, err := r.client.SubscribeAlarms(ctx, "Z28061"); !errors.Is(err, gateway.ErrNoCapability) {
		t.Fatalf("subscribe alarms without the capability: %v, want ErrNoCapability", err)
	}
	if _, err := r.client.AcknowledgeAlarm(ctx, "A1", "op", "", role.Epoch{Cluster: 1, Term: 1}); !errors.Is(err, gateway.ErrNoCapability) {
		t.Fatalf("acknowledge without the capability: %v, want ErrNoCapability", err)
	}
	if n := r.sim.Stats().Alarms.Subscribes["Z28061"]; n != 0 {
		t.Fatalf("gateway saw %d alarm subscribes, want none sent blind", n)
	}
}

func TestAlarmSubscribeStreamAndAcknowledge(t *testing.T) {
	r := startRig(t, sim.Config{}, gateway.Config{})
	ctx := context.Background()
	// An alarm active before the subscribe comes with the subscribe reply
	// (the refresh), one of another source does not.
	if err := r.sim.RaiseAlarm(sim.AlarmSpec{ID: "A0", Source: "Z28061", Severity: 500, Condition: "HiLevel", Message: "level high"}); err != nil {
		t.Fatal(err)
	}
	if err := r.sim.RaiseAlarm(sim.AlarmSpec{ID: "B0", Source: "Z28062", Severity: 500, Condition: "HiLevel"}); err != nil {
		t.Fatal(err)
	}
	got, err := r.client.SubscribeAlarms(ctx, "Z28061")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != "A0" || !got[0].Active || got[0].Acked || got[0].Severity != 500 || got[0].Message != "level high" || got[0].Seq != 1 {
		t.Fatalf("subscribe reply %+v, want only A0 active unacked severity 500 seq 1", got)
	}
	if err := r.sim.RaiseAlarm(sim.AlarmSpec{ID: "A1", Source: "Z28061", Severity: 900, Condition: "HiHiLevel"}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "raise streamed", func() bool {
		return r.rec.alarmSeen(func(a gateway.Alarm) bool { return a.ID == "A1" && a.Active && a.Seq == 1 })
	})
	epoch := role.Epoch{Cluster: 1, Term: 7}
	a, err := r.client.AcknowledgeAlarm(ctx, "A1", "alice", "seen it", epoch)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Acked || a.AckOperator != "alice" || a.Seq != 2 {
		t.Fatalf("after ack %+v, want acked by alice at seq 2", a)
	}
	acks := r.sim.Stats().Alarms.Acks
	if len(acks) != 1 || acks[0].Epoch != "1.7" || acks[0].Operator != "alice" || acks[0].Comment != "seen it" {
		t.Fatalf("gateway acks %+v, want one by alice at epoch 1.7", acks)
	}
	testwait.For(t, 5*time.Second, "ack streamed", func() bool {
		return r.rec.alarmSeen(func(a gateway.Alarm) bool { return a.ID == "A1" && a.Acked && a.AckOperator == "alice" })
	})
	if err := r.sim.ClearAlarm("A1"); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "clear streamed", func() bool {
		return r.rec.alarmSeen(func(a gateway.Alarm) bool { return a.ID == "A1" && !a.Active && a.Seq == 3 })
	})
	if r.rec.alarmSeen(func(a gateway.Alarm) bool { return a.ID == "B0" }) {
		t.Fatal("an alarm of an unsubscribed source was streamed")
	}
	// A newer epoch seen elsewhere fences this acknowledger off.
	if _, err := r.client.AcknowledgeAlarm(ctx, "A0", "bob", "", role.Epoch{Cluster: 1, Term: 6}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stale-epoch ack: %v, want FailedPrecondition", err)
	}
	if _, err := r.client.AcknowledgeAlarm(ctx, "nope", "bob", "", epoch); status.Code(err) != codes.NotFound {
		t.Fatalf("ack of an unknown alarm: %v, want NotFound", err)
	}
}

func TestAlarmsSurviveGatewayRestartAndLostReplies(t *testing.T) {
	r := startRig(t, sim.Config{}, gateway.Config{})
	if err := r.sim.RaiseAlarm(sim.AlarmSpec{ID: "A1", Source: "S", Severity: 100, Condition: "Off"}); err != nil {
		t.Fatal(err)
	}
	r.sim.DropReplies(time.Hour, gateway.KindSubscribeAlarms)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := r.client.SubscribeAlarms(ctx, "S"); err == nil {
		t.Fatal("subscribe answered while replies are dropped")
	}
	r.sim.Restart() // also ends the dropping
	testwait.For(t, 10*time.Second, "new session", func() bool { return r.client.State().Good && r.client.State().Session >= 2 })
	got, err := r.client.SubscribeAlarms(context.Background(), "S")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != "A1" || !got[0].Active {
		t.Fatalf("after a restart %+v, want A1 still active (alarms live in the field system)", got)
	}
}

func TestAlarmScript(t *testing.T) {
	steps, err := sim.ParseAlarmScript(`
# a raise, its ack and its clear
0s    raise A1 Z28061 700 HiLevel tank level high
20ms  ack   A1 hmi shift change
40ms  clear A1
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 3 || steps[0].Spec.Message != "tank level high" || steps[1].Comment != "shift change" {
		t.Fatalf("parsed %+v", steps)
	}
	for _, bad := range []string{"x raise A1 S 1 C", "0s raise A1 S 0 C", "0s explode A1", "0s raise A1 S 5", "0s ack A1"} {
		if _, err := sim.ParseAlarmScript(bad); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("script %q: err %v, want one naming line 1", bad, err)
		}
	}
	s := sim.New(sim.Config{})
	s.Run()
	defer s.Stop()
	s.RunAlarmScript(context.Background(), steps)
	al := s.Alarms()
	if len(al) != 1 || al[0].Active || !al[0].Acked || al[0].AckOperator != "hmi" || al[0].Seq != 3 {
		t.Fatalf("after the script %+v, want A1 cleared, acked by hmi, 3 transitions", al)
	}
}
