package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/field"
	"github.com/scadad/scadad/opcua"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/siteconfig"
	"github.com/scadad/scadad/storeforward"
	"github.com/scadad/scadad/subscribe"
)

// TestSubscribeConfigCarriesTheConnectionTuning: the mxaccess keys of the
// site config reach the subscribe workers and the gateway client (they
// were once parsed, defaulted and documented, and then dropped here).
func TestSubscribeConfigCarriesTheConnectionTuning(t *testing.T) {
	const site = `version: 1
name: tuning
connections:
  - name: tuned
    kind: mxaccess
    mxaccess: {endpoint: "127.0.0.1:1", backoff_floor: 7s, backoff_max: 90s, in_flight_ceiling: 80s, prefer_bulk_supervisory: false}
  - name: plain
    kind: mxaccess
    mxaccess: {endpoint: "127.0.0.1:2"}
instances:
  - name: Pump1
    connection: tuned
    attributes:
      - {name: Speed, type: double, tag: Pump1.Speed}
  - name: Pump2
    connection: plain
    attributes:
      - {name: Speed, type: double, tag: Pump2.Speed}
opcua:
  namespace_uri: urn:test:tuning
  security: [{policy: None, mode: None}]
  identities: {anonymous: true}
`
	s, err := siteconfig.Parse([]byte(site))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]subscribe.ConnectionOptions{}
	for _, c := range subscribeConfig(s).Connections {
		got[c.Name] = c.Options
	}
	tests := []struct {
		conn       string
		wantPolicy subscribe.RetryPolicy
		wantLegacy bool
	}{
		{"tuned", subscribe.RetryPolicy{Floor: 7 * time.Second, Max: 90 * time.Second, InFlightCeiling: 80 * time.Second}, true},
		{"plain", subscribe.RetryPolicy{Floor: siteconfig.DefaultMxBackoffFloor, Max: s.Connections[1].MxAccess.BackoffMax, InFlightCeiling: s.Connections[1].MxAccess.InFlightCeiling}, false},
	}
	for _, tt := range tests {
		o, ok := got[tt.conn]
		if !ok {
			t.Fatalf("connection %s missing from the subscribe config", tt.conn)
		}
		if o.Policy != tt.wantPolicy || o.LegacySubscribe != tt.wantLegacy {
			t.Errorf("%s: policy %+v legacy %v; want %+v legacy %v", tt.conn, o.Policy, o.LegacySubscribe, tt.wantPolicy, tt.wantLegacy)
		}
	}
}

// The OPC UA server gets each attribute's latest value once its address
// space is in place, also for values that came before it (a gateway sends
// an unchanging value only once); values of attributes the site no longer
// has are forgotten on the way.
func TestFanoutReplaysLatestValuesToTheOPCUAServer(t *testing.T) {
	roles := role.NewBroadcaster(role.State{Role: role.Standby})
	fan := &tagFanout{roles: roles}
	t0 := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	// Before any OPC UA server: values are only remembered.
	fan.TagUpdate("Pump1", "Speed", 1.0, field.QualityGood, t0)
	fan.TagUpdate("Pump1", "Speed", 2.0, field.QualityGood, t0.Add(time.Second))
	fan.TagUpdate("Pump1", "SpeedSP", 40.0, field.QualityGood, t0)
	fan.TagUpdate("Old", "Gone", 7.0, field.QualityBadNotConnected, t0)

	type got struct {
		v      any
		status ua.StatusCode
	}
	server := map[string]got{}
	known := map[string]bool{"Pump1.Speed": true, "Pump1.SpeedSP": true}
	fan.setOPCUA(func(instance, attribute string, v any, status ua.StatusCode, _ time.Time) error {
		key := instance + "." + attribute
		if !known[key] {
			return fmt.Errorf("%w: %s", opcua.ErrUnknownTag, key)
		}
		server[key] = got{v, status}
		return nil
	})
	fan.replayOPCUA()
	want := map[string]got{"Pump1.Speed": {2.0, ua.StatusGood}, "Pump1.SpeedSP": {40.0, ua.StatusGood}}
	if !maps.Equal(server, want) {
		t.Fatalf("server after the replay holds %v, want %v", server, want)
	}
	if _, kept := fan.latest[[2]string{"Old", "Gone"}]; kept {
		t.Fatal("the value of an attribute the server does not have was kept")
	}
	// Later values go straight through, and are what a replay gives.
	fan.TagUpdate("Pump1", "Speed", 3.0, field.QualityBadCommFailure, t0.Add(2*time.Second))
	if g := server["Pump1.Speed"]; g.v != 3.0 || g.status != ua.StatusBadNoCommunication {
		t.Fatalf("live update reached the server as %v, want 3 with BadNoCommunication (DA comm failure)", g)
	}
	clear(server)
	fan.replayOPCUA()
	if g := server["Pump1.Speed"]; g.v != 3.0 || g.status != ua.StatusBadNoCommunication {
		t.Fatalf("second replay gave %v, want the latest (3, BadNoCommunication)", g)
	}
}

// runRecordedHistory runs a forwarder of every value, one per message,
// into a recorder, until the test ends.
func runRecordedHistory(t *testing.T) (*storeforward.HistoryForwarder, *historyRecorder) {
	t.Helper()
	rec := &historyRecorder{}
	h, err := storeforward.NewHistoryForwarder(storeforward.HistoryOptions{Enqueuer: rec,
		Rules: []storeforward.HistoryRule{{Name: "all", Target: "historian", MaxBatch: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return h, rec
}

// historyRecorder records what a history forwarder enqueues.
type historyRecorder struct {
	mu       sync.Mutex
	payloads []storeforward.HistoryPayload
}

func (r *historyRecorder) Enqueue(_ context.Context, _ string, payload []byte, id string, _ []storeforward.Header) (storeforward.EnqueueResult, error) {
	var p storeforward.HistoryPayload
	if err := json.Unmarshal(payload, &p); err != nil {
		return storeforward.EnqueueResult{}, err
	}
	r.mu.Lock()
	r.payloads = append(r.payloads, p)
	r.mu.Unlock()
	return storeforward.EnqueueResult{ID: id}, nil
}

func (r *historyRecorder) values() map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]any{}
	for _, p := range r.payloads {
		for _, v := range p.Values {
			out[v.Instance+"."+v.Attribute] = v.Value
		}
	}
	return out
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
			fan := &tagFanout{roles: roles}
			t0 := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
			fan.TagUpdate("Pump1", "Speed", 1.0, field.QualityGood, t0)
			fan.TagUpdate("Pump1", "Speed", 2.0, field.QualityGood, t0.Add(time.Second))
			fan.TagUpdate("Pump1", "SpeedSP", 40.0, field.QualityGood, t0)
			h, rec := runRecordedHistory(t)
			fan.setHistory(h)
			roles.Publish(role.State{Role: role.Active})
			fan.TagUpdate("Marker", "Now", 1.0, field.QualityGood, t0)
			deadline := time.Now().Add(5 * time.Second)
			for rec.values()["Marker.Now"] == nil && time.Now().Before(deadline) {
				runtime.Gosched()
			}
			if got := rec.values(); !maps.Equal(got, tc.want) {
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
			fan := &tagFanout{roles: roles}
			fan.setHot(tc.hot)
			t0 := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
			h, rec := runRecordedHistory(t)
			fan.setHistory(h)
			fan.TagUpdate("Pump1", "SpeedSP", 40.0, field.QualityGood, t0) // as a Standby: not forwarded
			roles.Publish(role.State{Role: role.Active})
			fan.roleChanged(tc.was, role.Active)
			fan.TagUpdate("Marker", "Now", 1.0, field.QualityGood, t0)
			deadline := time.Now().Add(5 * time.Second)
			for rec.values()["Marker.Now"] == nil && time.Now().Before(deadline) {
				runtime.Gosched()
			}
			if got := rec.values(); !maps.Equal(got, tc.want) {
				t.Fatalf("forwarded %v, want %v", got, tc.want)
			}
		})
	}
}
