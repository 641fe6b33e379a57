package field

import (
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/role/roletest"
)

// The OPC UA server gets each attribute's latest value once its address
// space is in place, also for values that came before it (a gateway sends
// an unchanging value only once); values of attributes the site no longer
// has are forgotten on the way.
func TestFanoutReplaysLatestValuesToTheOPCUAServer(t *testing.T) {
	roles := role.NewBroadcaster(role.State{Role: role.Standby})
	fan := NewFanout(roles, nil)
	t0 := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	// Before any OPC UA server: values are only remembered.
	fan.TagUpdate("Pump1", "Speed", 1.0, QualityGood, t0)
	fan.TagUpdate("Pump1", "Speed", 2.0, QualityGood, t0.Add(time.Second))
	fan.TagUpdate("Pump1", "SpeedSP", 40.0, QualityGood, t0)
	fan.TagUpdate("Old", "Gone", 7.0, QualityBadNotConnected, t0)

	type got struct {
		v      any
		status ua.StatusCode
	}
	server := map[string]got{}
	known := map[string]bool{"Pump1.Speed": true, "Pump1.SpeedSP": true}
	fan.SetServer(func(instance, attribute string, v any, status ua.StatusCode, _ time.Time) error {
		key := instance + "." + attribute
		if !known[key] {
			return fmt.Errorf("%w: %s", ErrUnknownAttribute, key)
		}
		server[key] = got{v, status}
		return nil
	})
	fan.ReplayServer()
	want := map[string]got{"Pump1.Speed": {2.0, ua.StatusGood}, "Pump1.SpeedSP": {40.0, ua.StatusGood}}
	if !maps.Equal(server, want) {
		t.Fatalf("server after the replay holds %v, want %v", server, want)
	}
	if _, kept := fan.latest[[2]string{"Old", "Gone"}]; kept {
		t.Fatal("the value of an attribute the server does not have was kept")
	}
	// Later values go straight through, and are what a replay gives.
	fan.TagUpdate("Pump1", "Speed", 3.0, QualityBadCommFailure, t0.Add(2*time.Second))
	if g := server["Pump1.Speed"]; g.v != 3.0 || g.status != ua.StatusBadNoCommunication {
		t.Fatalf("live update reached the server as %v, want 3 with BadNoCommunication (DA comm failure)", g)
	}
	clear(server)
	fan.ReplayServer()
	if g := server["Pump1.Speed"]; g.v != 3.0 || g.status != ua.StatusBadNoCommunication {
		t.Fatalf("second replay gave %v, want the latest (3, BadNoCommunication)", g)
	}
}

// historyRecorder records what the fan-out offers history forwarding.
type historyRecorder struct {
	mu     sync.Mutex
	values map[string]any
}

func (r *historyRecorder) OfferUpdate(u Update) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.values == nil {
		r.values = map[string]any{}
	}
	r.values[u.Instance+"."+u.Attribute] = u.Value
	return true
}

func (r *historyRecorder) got() map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.values)
}

// A history forwarder built by a deploy on the Active node starts with
// every attribute's latest value: a value that does not change would
// otherwise never reach the historian. On a Standby it gets none (a
// marker value sent once the node is Active shows the forwarder had
// nothing before it).
func TestFanoutSeedsANewHistoryForwarder(t *testing.T) {
	for _, tc := range []struct {
		role role.Role
		want map[string]any
	}{
		{role.Active, map[string]any{"Pump1.Speed": 2.0, "Pump1.SpeedSP": 40.0, "Marker.Now": 1.0}},
		{role.Standby, map[string]any{"Marker.Now": 1.0}},
	} {
		t.Run(tc.role.String(), func(t *testing.T) {
			roles := role.NewBroadcaster(role.State{Role: tc.role})
			fan := NewFanout(roles, nil)
			t0 := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
			fan.TagUpdate("Pump1", "Speed", 1.0, QualityGood, t0)
			fan.TagUpdate("Pump1", "Speed", 2.0, QualityGood, t0.Add(time.Second))
			fan.TagUpdate("Pump1", "SpeedSP", 40.0, QualityGood, t0)
			rec := &historyRecorder{}
			fan.SetHistory(rec)
			roles.Publish(role.State{Role: role.Active})
			fan.TagUpdate("Marker", "Now", 1.0, QualityGood, t0)
			if got := rec.got(); !maps.Equal(got, tc.want) {
				t.Fatalf("forwarded %v, want %v", got, tc.want)
			}
		})
	}
}

// A hot Standby that becomes Active hands its latest values to the history
// forwarder (its workers do not subscribe again, so nothing new comes of a
// value that does not change); a node that is not hot does not (it
// subscribes anew, and its remembered values are stale), nor does a node
// that was Active already.
func TestHotStandbyBecomingActiveSeedsHistory(t *testing.T) {
	for _, tc := range []struct {
		hot  bool
		was  role.Role
		want map[string]any
	}{
		{true, role.Standby, map[string]any{"Pump1.SpeedSP": 40.0, "Marker.Now": 1.0}},
		{false, role.Standby, map[string]any{"Marker.Now": 1.0}},
		{true, role.Active, map[string]any{"Marker.Now": 1.0}},
	} {
		t.Run(fmt.Sprintf("hot=%v,was=%v", tc.hot, tc.was), func(t *testing.T) {
			roles := role.NewBroadcaster(role.State{Role: role.Standby})
			fan := NewFanout(roles, nil)
			fan.SetHot(tc.hot)
			t0 := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
			rec := &historyRecorder{}
			fan.SetHistory(rec)
			fan.TagUpdate("Pump1", "SpeedSP", 40.0, QualityGood, t0) // as a Standby: not forwarded
			roles.Publish(role.State{Role: role.Active})
			fan.roleChanged(tc.was, role.Active)
			fan.TagUpdate("Marker", "Now", 1.0, QualityGood, t0)
			if got := rec.got(); !maps.Equal(got, tc.want) {
				t.Fatalf("forwarded %v, want %v", got, tc.want)
			}
		})
	}
}

// A value that reaches the Active while its quorum confirmation is late
// for a moment is still forwarded: the gateway sends a value once and then
// only on change, so a value held back then would never reach the
// historian, and its enqueue commits only through a quorum anyway. A node
// with no cluster contact (Detached, not the leader) forwards nothing.
func TestAValueArrivingWhileTheConfirmationIsLateIsForwarded(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	roles := roletest.New(role.State{Role: role.Active, Voters: 2})
	fan := NewFanout(roles, nil)
	rec := &historyRecorder{}
	fan.SetHistory(rec)
	roles.Late()
	fan.TagUpdate("Pump1", "SpeedSP", 40.0, QualityGood, t0)
	if roles.Asked() == 0 {
		t.Fatal("the fan-out did not look at the role")
	}
	if got, want := rec.got(), map[string]any{"Pump1.SpeedSP": 40.0}; !maps.Equal(got, want) {
		t.Fatalf("forwarded %v during the late confirmation, want %v", got, want)
	}

	detached := role.NewBroadcaster(role.State{Role: role.Detached, Voters: 2})
	cut := NewFanout(detached, nil)
	rec2 := &historyRecorder{}
	cut.SetHistory(rec2)
	cut.TagUpdate("Pump1", "SpeedSP", 40.0, QualityGood, t0)
	if got := rec2.got(); len(got) != 0 {
		t.Fatalf("a Detached node forwarded %v", got)
	}
}
