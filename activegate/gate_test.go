package activegate

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scadad/scadad/role"
)

func TestDecideIsTheSeedsPolicy(t *testing.T) {
	for _, tc := range []struct {
		st     role.State
		allow  bool
		reason string
	}{
		{role.State{Role: role.Active, Voters: 2}, true, ""},
		{role.State{Role: role.Standby, Voters: 2}, false, ReasonSecondary},
		{role.State{Role: role.Witness, Voters: 2}, false, ReasonSecondary},
		{role.State{Role: role.Detached, Voters: 1}, true, ""},
		{role.State{Role: role.Detached, Voters: 2}, false, ReasonDetached},
		{role.State{Role: role.Detached}, false, ReasonRoleUnknown},
		{role.State{Role: role.Role(99), Voters: 2}, false, ReasonRoleUnknown},
	} {
		allow, reason := Decide(tc.st)
		if allow != tc.allow || reason != tc.reason {
			t.Errorf("%+v: %v %q, want %v %q", tc.st, allow, reason, tc.allow, tc.reason)
		}
	}
}

func TestCounterHasEverySeriesAndCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	c, err := NewCounter(reg)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(series(t, reg)); n != 9 {
		t.Fatalf("%d series, want 9 (3 surfaces x 3 reasons)", n)
	}
	c.Denied(SurfaceAck, ReasonRoleUnknown)
	c.DeniedN(SurfaceAlarmEmit, ReasonSecondary, 3)
	var nilCounter *Counter
	nilCounter.Denied(SurfaceWrite, ReasonSecondary)
	got := series(t, reg)
	if v := got[SurfaceAck+"/"+ReasonRoleUnknown]; v != 1 {
		t.Fatalf("ack role-unknown = %v", v)
	}
	if v := got[SurfaceAlarmEmit+"/"+ReasonSecondary]; v != 3 {
		t.Fatalf("alarm-emit secondary = %v", v)
	}
	if v := got[SurfaceWrite+"/"+ReasonSecondary]; v != 0 {
		t.Fatalf("write secondary = %v, want 0", v)
	}
}

// series reads scadad_gate_denied_total as surface/reason → value.
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "scadad_gate_denied_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var surface, reason string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "surface":
					surface = l.GetValue()
				case "reason":
					reason = l.GetValue()
				}
			}
			out[surface+"/"+reason] = m.GetCounter().GetValue()
		}
	}
	return out
}
