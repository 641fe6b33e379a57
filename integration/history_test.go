package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/storeforward"
)

// historySample is the sampling rule's interval in
// TestHistoryForwardedFromTheGatewayToTheSink.
const historySample = 300 * time.Millisecond

// historyRules forwards Pump1.Speed twice: on every change, and sampled.
var historyRules = fmt.Sprintf(`history:
  - name: changes
    target: historian
    select: [{instance: Pump1, attributes: [Speed]}]
    mode: on_change
    max_batch: 100
    max_batch_delay: 200ms
  - name: cyclic
    target: historian
    select: [{instance: Pump1, attributes: [Speed]}]
    mode: sample
    sample_interval: %s
    max_batch: 100
    max_batch_delay: 100ms
`, historySample)

// historyMessage is one history message the sink received.
type historyMessage struct {
	epoch   string
	payload storeforward.HistoryPayload
}

func historyReceived(t *testing.T, sink *testcluster.Sink) map[string][]historyMessage {
	t.Helper()
	ds, err := sink.Deliveries()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]historyMessage{}
	seen := map[string]bool{}
	for _, d := range ds {
		if seen[d.ID] {
			continue // an at-least-once repeat
		}
		seen[d.ID] = true
		if !strings.HasPrefix(d.ID, "hist-") {
			t.Fatalf("the sink received message %q, not a history message", d.ID)
		}
		var p storeforward.HistoryPayload
		if err := json.Unmarshal(d.Body, &p); err != nil {
			t.Fatalf("history message %s: %v (body %q)", d.ID, err, d.Body)
		}
		out[p.Rule] = append(out[p.Rule], historyMessage{epoch: d.Epoch, payload: p})
	}
	return out
}

// Values from the gateway simulator travel through the Active node's
// subscribe workers and the replicated buffer to a real HTTP sink, by both
// history modes, and keep travelling from the new Active after a SIGKILL.
func TestHistoryForwardedFromTheGatewayToTheSink(t *testing.T) {
	sim := startSim(t, "-change", "100ms")
	sink := startSink(t, "-bodies")
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	site := testcluster.SiteConfigGateway("hist", sim.Addr, map[string]string{"historian": sink.URL}, 0)
	deploySite(t, c, append(site, historyRules...))

	var got map[string][]historyMessage
	testwait.For(t, 30*time.Second, "5 messages of each history rule at the sink", func() bool {
		got = historyReceived(t, sink)
		return len(got["changes"]) >= 5 && len(got["cyclic"]) >= 5
	})

	firstEpoch := got["cyclic"][0].epoch
	for _, m := range got["changes"] {
		for _, v := range m.payload.Values {
			if v.Instance != "Pump1" || v.Attribute != "Speed" || v.Quality == "" || v.Timestamp.IsZero() || !v.SampledAt.IsZero() {
				t.Fatalf("on-change value %+v: want Pump1.Speed with quality and source time, no sampled_at", v)
			}
		}
	}
	// One sampler, on one grid: a second node sampling too would show
	// sample times off the Active's grid (beyond ±100 ms) or twice.
	var last time.Time
	for _, m := range got["cyclic"] {
		if m.epoch != firstEpoch {
			continue
		}
		if len(m.payload.Values) == 0 {
			t.Fatal("an empty sample message")
		}
		for _, v := range m.payload.Values {
			if v.Instance != "Pump1" || v.Attribute != "Speed" || v.SampledAt.IsZero() {
				t.Fatalf("sampled value %+v: want Pump1.Speed with sampled_at", v)
			}
			if !last.IsZero() {
				// sampled_at is when the sample ran: on the grid, give or
				// take the timer's lateness on a busy machine.
				gap := v.SampledAt.Sub(last)
				off := (gap + historySample/2) % historySample
				if gap < historySample/2 || off < historySample/6 || off > historySample*5/6 {
					t.Fatalf("samples %s and %s are %s apart, want about a multiple of %s", last, v.SampledAt, gap, historySample)
				}
			}
			last = v.SampledAt
		}
	}

	// SIGKILL the Active: the survivor samples and forwards from its own
	// subscriptions, delivering under its own epoch.
	killed := time.Now()
	c.Kill(active)
	testwait.For(t, 30*time.Second, "samples taken by the new Active at the sink", func() bool {
		n := 0
		for _, m := range historyReceived(t, sink)["cyclic"] {
			if m.epoch != firstEpoch && len(m.payload.Values) > 0 && m.payload.Values[0].SampledAt.After(killed) {
				n++
			}
		}
		return n >= 3
	})

	var survivor *testcluster.Node
	for _, n := range c.Nodes {
		if n != active && !n.Witness {
			survivor = n
		}
	}
	body, err := scrapeMetrics(survivor)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`scadad_history_messages_total{rule="cyclic"}`, `scadad_history_values_total{rule="changes"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics of the new Active lacks %s", want)
		}
	}
}

// An instance whose attributes sit on two gateways (an attribute-level
// connection override) has both attributes subscribed on the Active, each
// from its own gateway simulator process, and forwarded to the sink.
func TestInstanceSpanningTwoGatewaysForwardsBoth(t *testing.T) {
	sims := [2]*testcluster.Sim{startSim(t, "-change", "100ms"), startSim(t, "-change", "100ms")}
	sink := startSink(t, "-bodies")
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	waitOneActive(t, c, 20*time.Second)
	site := fmt.Sprintf(`version: 1
name: span
connections:
  - {name: gw1, kind: mxaccess, mxaccess: {endpoint: %s}}
  - {name: gw2, kind: mxaccess, mxaccess: {endpoint: %s}}
instances:
  - name: Pump1
    connection: gw1
    attributes:
      - {name: Speed, type: double, tag: Pump1.Speed}
      - {name: Flow, type: double, tag: Pump1.Flow, connection: gw2}
opcua:
  namespace_uri: urn:test:scadad
  security: [{policy: None, mode: None}]
  identities: {anonymous: true}
targets:
  - {name: historian, url: %q, timeout: 2s, backoff_floor: 20ms, backoff_max: 200ms}
history:
  - name: changes
    target: historian
    select: [{instance: Pump1, attributes: [Speed, Flow]}]
    mode: on_change
    max_batch: 100
    max_batch_delay: 200ms
`, sims[0].Addr, sims[1].Addr, sink.URL)
	deploySite(t, c, []byte(site))

	var seen map[string]int
	testwait.For(t, 30*time.Second, "good values of Pump1.Speed and Pump1.Flow at the sink", func() bool {
		seen = map[string]int{}
		for _, m := range historyReceived(t, sink)["changes"] {
			for _, v := range m.payload.Values {
				if v.Instance == "Pump1" && v.Quality == "good" {
					seen[v.Attribute]++
				}
			}
		}
		return seen["Speed"] >= 3 && seen["Flow"] >= 3
	})

	t.Logf("good values at the sink: %v", seen)
}

// A history rule added by a later deploy forwards the current value of
// every attribute it selects, also of one that never changes: the gateway
// sent it once, when it was advised, before the rule existed.
func TestHistoryRuleAddedLaterForwardsCurrentValues(t *testing.T) {
	sim, c, active, _ := opcuaPair(t, "-change", "0")
	sink := startSink(t, "-bodies")
	site := testcluster.SiteConfigGateway("hist-late", sim.Addr, map[string]string{"historian": sink.URL}, 0)
	deploySite(t, c, site)
	testwait.For(t, 20*time.Second, "the unchanging Pump1.Speed Good on the Active (its one value arrived)", func() bool {
		return goodValue(active.OPCUA, "urn:test:scadad", "Pump1.Speed")
	})

	deploySite(t, c, append(site, `history:
  - name: late
    target: historian
    select: [{instance: Pump1}]
    mode: on_change
    max_batch: 100
    max_batch_delay: 100ms
`...))
	testwait.For(t, 20*time.Second, "Pump1.Speed and Pump1.SpeedSP at the sink", func() bool {
		seen := map[string]bool{}
		for _, m := range historyReceived(t, sink)["late"] {
			for _, v := range m.payload.Values {
				seen[v.Instance+"."+v.Attribute] = true
			}
		}
		return seen["Pump1.Speed"] && seen["Pump1.SpeedSP"]
	})

}

// With hot_standby the Standby's workers run all along and do not
// subscribe again when it becomes Active, so the gateway sends nothing new
// of a value that does not change: the new Active must still forward the
// current values (under its own epoch) after the old one is killed.
func TestHotStandbyFailoverForwardsCurrentValues(t *testing.T) {
	sim := startSim(t, "-change", "0")
	sink := startSink(t, "-bodies")
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	site := testcluster.SiteConfigGateway("hist-hot", sim.Addr, map[string]string{"historian": sink.URL}, 0)
	deploySite(t, c, append(site, `hot_standby: true
history:
  - name: hot
    target: historian
    select: [{instance: Pump1}]
    mode: on_change
    max_batch: 100
    max_batch_delay: 100ms
`...))
	var firstEpoch string
	testwait.For(t, 20*time.Second, "Pump1.SpeedSP from the first Active at the sink", func() bool {
		for _, m := range historyReceived(t, sink)["hot"] {
			for _, v := range m.payload.Values {
				if v.Attribute == "SpeedSP" {
					firstEpoch = m.epoch
					return true
				}
			}
		}
		return false
	})

	c.Kill(active)
	waitOneActive(t, c, 20*time.Second)
	testwait.For(t, 20*time.Second, "Pump1.SpeedSP forwarded again by the new Active", func() bool {
		for _, m := range historyReceived(t, sink)["hot"] {
			for _, v := range m.payload.Values {
				if v.Attribute == "SpeedSP" && m.epoch != firstEpoch {
					return true
				}
			}
		}
		return false
	})

}
