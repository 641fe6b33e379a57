package main

import (
	"testing"
	"time"

	"github.com/scadad/scadad/siteconfig"
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
