//go:build linux

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/storeforward"
	"github.com/scadad/scadad/storeforward/sparkplug/sparkplugpb"
)

type spMessage struct {
	kind, device string
	p            *sparkplugpb.Payload
}

func spDecode(t *testing.T, rec *testcluster.MQTTRecorder) []spMessage {
	t.Helper()
	var out []spMessage
	for _, m := range rec.Messages() {
		parts := strings.Split(m.Topic, "/")
		if len(parts) < 4 || parts[1] != "plant" || parts[3] != "scadad" {
			continue
		}
		p := &sparkplugpb.Payload{}
		if err := proto.Unmarshal(m.Payload, p); err != nil {
			t.Fatalf("%s: %v", m.Topic, err)
		}
		s := spMessage{kind: parts[2], p: p}
		if len(parts) > 4 {
			s.device = parts[4]
		}
		out = append(out, s)
	}
	return out
}

// spCluster starts what a Sparkplug history test needs: a broker with a
// recorder standing in for primary host host1 (its STATE online), the
// gateway simulator changing values every 100 ms, and a witness cluster
// with its Active node.
func spCluster(t *testing.T) (*testcluster.Mosquitto, *testcluster.MQTTRecorder, *testcluster.Sim, *testcluster.Cluster, *testcluster.Node) {
	t.Helper()
	broker, host := testcluster.StartRecordedMosquitto(t, testcluster.MosquittoOptions{}, "test-host", "spBv1.0/#")
	spHostState(t, host, true)
	sim := startSim(t, "-change", "100ms")
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	return broker, host, sim, c, waitOneActive(t, c, 20*time.Second)
}

// spHostState publishes primary host host1's STATE (Sparkplug 3.0's
// JSON, retained) as rec.
func spHostState(t *testing.T, rec *testcluster.MQTTRecorder, online bool) {
	t.Helper()
	if err := rec.Publish(context.Background(), "spBv1.0/STATE/host1", fmt.Appendf(nil, `{"online": %v, "timestamp": %d}`, online, time.Now().UnixMilli()), true); err != nil {
		t.Fatal(err)
	}
}

func spBdSeq(p *sparkplugpb.Payload) int64 {
	for _, m := range p.Metrics {
		if m.GetName() == "bdSeq" {
			return int64(m.GetLongValue())
		}
	}
	return -1
}

// Tag history from the gateway simulator reaches a real Mosquitto as
// Sparkplug B from real scadad processes: NBIRTH, DBIRTH (Pump1's Speed
// and SpeedSP with aliases) and DDATA decoded with the Tahu proto, seq
// continuous per birth; with the primary host's STATE offline nothing is
// published and the values of that time arrive once it is back; after a
// SIGKILL of the Active the broker publishes its NDEATH (the will, with
// its bdSeq) and the survivor births with the next bdSeq, and again after
// a restart of the broker.
func TestHistorySparkplugEdgeNodeAcrossSIGKILL(t *testing.T) {
	broker, host, sim, c, active := spCluster(t)
	state := func(online bool) { t.Helper(); spHostState(t, host, online) }
	site := string(testcluster.SiteConfigGateway("sparkplug", sim.Addr, nil, 0))
	site += fmt.Sprintf("  - {name: uns, kind: mqtt, mqtt: {broker: %q, username: scadad, password_file: %q, sparkplug: {group_id: plant, edge_node: scadad, primary_host: host1}}, max_attempts: 1, timeout: 5s, backoff_floor: 20ms, backoff_max: 500ms}\n", broker.URL, broker.PasswordFile)
	site += "history:\n  - {name: pumps, target: uns, format: sparkplug, select: [{instance: Pump1}], max_batch: 50, max_batch_delay: 100ms}\n"
	deploySite(t, c, []byte(site))

	var msgs []spMessage
	testwait.For(t, 30*time.Second, "NBIRTH, DBIRTH and 5 DDATA", func() bool {
		msgs = spDecode(t, host)
		n := 0
		for _, m := range msgs {
			if m.kind == "DDATA" {
				n++
			}
		}
		return n >= 5
	})
	if msgs[0].kind != "NBIRTH" || msgs[0].p.GetSeq() != 0 || msgs[1].kind != "DBIRTH" || msgs[1].device != "Pump1" {
		t.Fatalf("first messages %s %s", msgs[0].kind, msgs[1].kind)
	}
	firstBd := spBdSeq(msgs[0].p)
	names := map[uint64]string{}
	for _, m := range msgs[1].p.Metrics {
		names[m.GetAlias()] = m.GetName()
	}
	if names[1] != "Speed" || names[2] != "SpeedSP" {
		t.Fatalf("DBIRTH aliases %v, want 1 Speed, 2 SpeedSP", names)
	}

	// The primary host goes offline for 2 s: nothing is published then,
	// and the values of that time arrive afterwards.
	state(false)
	testwait.For(t, 10*time.Second, "the node's NDEATH", func() bool {
		msgs = spDecode(t, host)
		return msgs[len(msgs)-1].kind == "NDEATH"
	})
	offlineFrom, held := time.Now(), len(msgs)
	testwait.For(t, 10*time.Second, "2 s with the host offline", func() bool { return time.Since(offlineFrom) > 2*time.Second })
	if msgs = spDecode(t, host); len(msgs) != held {
		t.Fatalf("%d messages published while the primary host was offline", len(msgs)-held)
	}
	state(true)
	offlineTo := time.Now()
	testwait.For(t, 30*time.Second, "the values taken while the host was offline", func() bool {
		msgs = spDecode(t, host)
		n := 0
		for _, m := range msgs[held:] {
			for _, pm := range m.p.Metrics {
				if m.kind == "DDATA" && pm.GetTimestamp() > uint64(offlineFrom.Add(300*time.Millisecond).UnixMilli()) && pm.GetTimestamp() < uint64(offlineTo.Add(-300*time.Millisecond).UnixMilli()) {
					n++
				}
			}
		}
		return n >= 10
	})
	if msgs[held].kind != "NBIRTH" || spBdSeq(msgs[held].p) != firstBd+1 {
		t.Fatalf("after the host came back: %s with bdSeq %d, want NBIRTH with %d", msgs[held].kind, spBdSeq(msgs[held].p), firstBd+1)
	}
	// Held attempts are not failed ones: with max_attempts 1 nothing parked.
	var stats []*controlpb.SFTargetStats
	ctlJSON(t, c, []*testcluster.Node{active}, &stats, "sf", "stats")
	if len(stats) != 1 || stats[0].Parked != 0 {
		t.Fatalf("sf stats %v: a message held for the primary host was parked", stats)
	}

	// SIGKILL the Active: its will, then the survivor's births.
	before := len(msgs)
	c.Kill(active)
	testwait.For(t, 60*time.Second, "the will and a new NBIRTH with DDATA after it", func() bool {
		msgs = spDecode(t, host)
		death, birth := -1, -1
		for i := before; i < len(msgs); i++ {
			switch {
			case msgs[i].kind == "NDEATH" && death < 0:
				death = i
			case msgs[i].kind == "NBIRTH":
				birth = i
			}
		}
		return death >= 0 && birth >= 0 && msgs[len(msgs)-1].kind == "DDATA"
	})
	var deaths, births []int64
	for _, m := range msgs[before:] {
		switch m.kind {
		case "NDEATH":
			deaths = append(deaths, spBdSeq(m.p))
		case "NBIRTH":
			births = append(births, spBdSeq(m.p))
		}
	}
	if len(deaths) == 0 || deaths[0] != firstBd+1 {
		t.Fatalf("NDEATHs after the kill %v, want the killed session's bdSeq %d first", deaths, firstBd+1)
	}
	if len(births) == 0 || births[0] != firstBd+2 {
		t.Fatalf("NBIRTHs after the kill %v, want bdSeq %d (the next, counted in the replicated state)", births, firstBd+2)
	}

	// The broker restarts: the survivor's session ends with the
	// connection, and it births again with the next bdSeq.
	before = len(msgs)
	broker.Stop()
	if err := broker.Start(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 60*time.Second, "an NBIRTH after the broker's restart, then DDATA", func() bool {
		msgs = spDecode(t, host)
		return slices.ContainsFunc(msgs[before:], func(m spMessage) bool { return m.kind == "NBIRTH" }) && msgs[len(msgs)-1].kind == "DDATA"
	})
	for _, m := range msgs[before:] {
		if m.kind == "NBIRTH" {
			if got := spBdSeq(m.p); got != firstBd+3 {
				t.Fatalf("NBIRTH after the broker's restart: bdSeq %d, want %d", got, firstBd+3)
			}
			break
		}
	}

	// seq: continuous from each NBIRTH; every DDATA alias declared. The
	// recorder's QoS 1 subscription may get a message again across the
	// broker's restart (Mosquitto redelivers from its persistence what the
	// recorder had not acknowledged): the very same message, skipped.
	var next uint64
	for i, m := range msgs {
		if m.kind == "NDEATH" {
			continue
		}
		if slices.ContainsFunc(msgs[max(i-10, 0):i], func(o spMessage) bool { return o.kind == m.kind && proto.Equal(o.p, m.p) }) {
			continue
		}
		if m.kind == "NBIRTH" {
			next = 0
		}
		if m.p.GetSeq() != next%256 {
			var around []string
			for j := max(i-6, 0); j < min(i+3, len(msgs)); j++ {
				around = append(around, fmt.Sprintf("%d:%s/%d/bd%d", j, msgs[j].kind, msgs[j].p.GetSeq(), spBdSeq(msgs[j].p)))
			}
			t.Fatalf("message %d (%s): seq %d, want %d (around: %v)", i, m.kind, m.p.GetSeq(), next%256, around)
		}
		next++
		if m.kind == "DDATA" {
			for _, pm := range m.p.Metrics {
				if names[pm.GetAlias()] == "" {
					t.Fatalf("DDATA alias %d not in the DBIRTH", pm.GetAlias())
				}
			}
		}
	}
	t.Logf("%d Sparkplug messages; bdSeq %d, %d, then %v", len(msgs), firstBd, firstBd+1, births)
}

// A deploy removes an instance whose values are still in the buffer (held
// there while the primary host is offline): the next session births the
// remaining devices as their values come, publishes the removed device's
// last values after a DBIRTH of it, then its DDEATH, so a host application does not keep it
// online; the remaining device's data goes on.
func TestHistorySparkplugDeviceRemovedByDeployDies(t *testing.T) {
	broker, host, sim, c, _ := spCluster(t)
	state := func(online bool) { t.Helper(); spHostState(t, host, online) }
	site := func(instances ...string) []byte {
		s := string(testcluster.SiteConfigGateway("sparkplug", sim.Addr, nil, 0))
		var extra, sel strings.Builder
		for _, in := range instances {
			if in != "Pump1" {
				fmt.Fprintf(&extra, "  - name: %s\n    connection: gw\n    attributes:\n      - {name: Speed, type: double, tag: %s.Speed}\n", in, in)
			}
			fmt.Fprintf(&sel, "{instance: %s}, ", in)
		}
		s = strings.Replace(s, "opcua:\n", extra.String()+"opcua:\n", 1)
		s += fmt.Sprintf("  - {name: uns, kind: mqtt, mqtt: {broker: %q, username: scadad, password_file: %q, sparkplug: {group_id: plant, edge_node: scadad, primary_host: host1}}, timeout: 5s, backoff_floor: 20ms, backoff_max: 500ms}\n", broker.URL, broker.PasswordFile)
		s += "history:\n  - {name: pumps, target: uns, format: sparkplug, select: [" + strings.TrimSuffix(sel.String(), ", ") + "], max_batch: 50, max_batch_delay: 100ms}\n"
		return []byte(s)
	}
	deploySite(t, c, site("Pump1", "Pump2"))
	var msgs []spMessage
	testwait.For(t, 30*time.Second, "DDATA of Pump2", func() bool {
		msgs = spDecode(t, host)
		return slices.ContainsFunc(msgs, func(m spMessage) bool { return m.kind == "DDATA" && m.device == "Pump2" })
	})

	// Values of Pump2 wait in the buffer while the host is offline; then
	// the deploy removes Pump2.
	state(false)
	testwait.For(t, 10*time.Second, "the node's NDEATH", func() bool {
		msgs = spDecode(t, host)
		return msgs[len(msgs)-1].kind == "NDEATH"
	})
	offline := time.Now()
	testwait.For(t, 5*time.Second, "1 s of values held", func() bool { return time.Since(offline) > time.Second })
	deploySite(t, c, site("Pump1"))
	held := len(spDecode(t, host))
	state(true)

	var got []string
	testwait.ForDetail(t, 30*time.Second, "Pump2's DDEATH after its last values, then Pump1's DDATA", func() (bool, string) {
		msgs = spDecode(t, host)
		got = got[:0]
		for _, m := range msgs[held:] {
			got = append(got, m.kind+"/"+m.device)
		}
		death := slices.Index(got, "DDEATH/Pump2")
		return death > 0 && slices.Contains(got[death:], "DDATA/Pump1"), strings.Join(got, " ")
	})
	if got[0] != "NBIRTH/" || !slices.Contains(got, "DBIRTH/Pump1") || slices.Index(got, "DBIRTH/Pump1") > slices.Index(got, "DDATA/Pump1") {
		t.Fatalf("after the deploy: %v, want NBIRTH, then DBIRTH of Pump1 before its DDATA", got)
	}
	death := slices.Index(got, "DDEATH/Pump2")
	if !slices.Contains(got[:death], "DBIRTH/Pump2") || !slices.Contains(got[:death], "DDATA/Pump2") ||
		slices.ContainsFunc(got[death+1:], func(k string) bool { return strings.HasSuffix(k, "/Pump2") }) {
		t.Fatalf("after the deploy: %v, want Pump2 born, its held values, its DDEATH, nothing of it after", got)
	}
	t.Logf("after the deploy: %v", got)
}

// spSeqContinuous fails unless seq runs 0, 1, 2, … from each NBIRTH and
// every DDATA alias was declared by its device's DBIRTH of that session.
func spSeqContinuous(t *testing.T, msgs []spMessage) {
	t.Helper()
	spWalk(t, msgs, nil)
}

// spWalk is spSeqContinuous calling data, when not nil, with each value
// of a device: each DDATA metric with the name its DBIRTH gave its alias,
// and each DBIRTH metric that is not null (a DBIRTH holds the device's
// current values: a device born by a message carries its first values
// there, a device born again its last). A device's DDEATH
// undeclares its aliases until its next DBIRTH. A message the very same
// as an earlier one (a subscriber's persistent session handed it again
// across a restart of the broker) is skipped.
func spWalk(t *testing.T, msgs []spMessage, data func(i int, device, name string, pm *sparkplugpb.Payload_Metric)) {
	t.Helper()
	var next uint64
	declared := map[string]map[uint64]string{}
	seen := map[string]bool{}
	for i, m := range msgs {
		if m.kind == "NDEATH" {
			continue
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m.p)
		if err != nil {
			t.Fatal(err)
		}
		if key := m.kind + "/" + m.device + "/" + string(b); seen[key] {
			continue
		} else {
			seen[key] = true
		}
		if m.kind == "NBIRTH" {
			next = 0
			clear(declared)
		}
		if m.p.GetSeq() != next%256 {
			t.Fatalf("message %d (%s %s): seq %d, want %d", i, m.kind, m.device, m.p.GetSeq(), next%256)
		}
		next++
		switch m.kind {
		case "DBIRTH":
			declared[m.device] = map[uint64]string{}
			for _, pm := range m.p.Metrics {
				declared[m.device][pm.GetAlias()] = pm.GetName()
				if data != nil && !pm.GetIsNull() {
					data(i, m.device, pm.GetName(), pm)
				}
			}
		case "DDEATH":
			delete(declared, m.device)
		case "DDATA":
			for _, pm := range m.p.Metrics {
				name, ok := declared[m.device][pm.GetAlias()]
				if !ok {
					t.Fatalf("message %d: DDATA of %s with alias %d its DBIRTH did not declare", i, m.device, pm.GetAlias())
				}
				if data != nil {
					data(i, m.device, name, pm)
				}
			}
		}
	}
}

// The gateway of one instance crashes (the simulator SIGKILLed): that
// device's DDEATH, in the same session (seq continuous), while the other
// device's DDATA goes on and nothing more of the dead one is published;
// the gateway back, the device's DBIRTH with its current values, then its
// DDATA.
func TestHistorySparkplugDeviceDiesWithItsGatewayConnection(t *testing.T) {
	broker, host, sim1, c, _ := spCluster(t)
	sim2 := startSim(t, "-change", "100ms")
	site := string(testcluster.SiteConfigGateway("sparkplug", sim1.Addr, nil, 0))
	site = strings.Replace(site, "connections:\n", fmt.Sprintf("connections:\n  - {name: gw2, kind: mxaccess, mxaccess: {endpoint: %s}}\n", sim2.Addr), 1)
	site = strings.Replace(site, "opcua:\n", "  - name: Pump2\n    connection: gw2\n    attributes:\n      - {name: Speed, type: double, tag: Pump2.Speed}\nopcua:\n", 1)
	site += fmt.Sprintf("  - {name: uns, kind: mqtt, mqtt: {broker: %q, username: scadad, password_file: %q, sparkplug: {group_id: plant, edge_node: scadad, primary_host: host1}}, timeout: 5s, backoff_floor: 20ms, backoff_max: 500ms}\n", broker.URL, broker.PasswordFile)
	site += "history:\n  - {name: pumps, target: uns, format: sparkplug, select: [{instance: Pump1}, {instance: Pump2}], max_batch: 50, max_batch_delay: 100ms}\n"
	deploySite(t, c, []byte(site))

	kinds := func(msgs []spMessage) string {
		var out []string
		for _, m := range msgs {
			out = append(out, m.kind+"/"+m.device)
		}
		return strings.Join(out, " ")
	}
	var msgs []spMessage
	testwait.For(t, 30*time.Second, "DDATA of Pump1 and Pump2", func() bool {
		msgs = spDecode(t, host)
		return slices.ContainsFunc(msgs, func(m spMessage) bool { return m.kind == "DDATA" && m.device == "Pump2" }) &&
			slices.ContainsFunc(msgs, func(m spMessage) bool { return m.kind == "DDATA" && m.device == "Pump1" })
	})

	sim2.Kill()
	killed := time.Now()
	var death int
	testwait.ForDetail(t, 30*time.Second, "Pump2's DDEATH, then 2 s of Pump1's DDATA", func() (bool, string) {
		msgs = spDecode(t, host)
		death = slices.IndexFunc(msgs, func(m spMessage) bool { return m.kind == "DDEATH" && m.device == "Pump2" })
		return death >= 0 && time.Since(killed) > 2*time.Second, kinds(msgs[max(len(msgs)-12, 0):])
	})
	after := msgs[death+1:]
	if n := len(slices.DeleteFunc(slices.Clone(after), func(m spMessage) bool { return m.kind != "DDATA" || m.device != "Pump1" })); n < 5 {
		t.Fatalf("%d DDATA of Pump1 in the 2 s after Pump2's DDEATH, want its data going on: %s", n, kinds(after))
	}
	if i := slices.IndexFunc(after, func(m spMessage) bool { return m.device == "Pump2" || m.kind == "NBIRTH" || m.kind == "NDEATH" }); i >= 0 {
		t.Fatalf("after Pump2's DDEATH, with its gateway down: %s (want nothing of it, and the same session)", kinds(after[:i+1]))
	}

	if err := sim2.Start(); err != nil {
		t.Fatal(err)
	}
	var birth int
	testwait.ForDetail(t, 30*time.Second, "Pump2's DBIRTH, then its DDATA", func() (bool, string) {
		msgs = spDecode(t, host)
		birth = slices.IndexFunc(msgs[death:], func(m spMessage) bool { return m.kind == "DBIRTH" && m.device == "Pump2" })
		return birth >= 0 && slices.ContainsFunc(msgs[death+birth:], func(m spMessage) bool { return m.kind == "DDATA" && m.device == "Pump2" }),
			kinds(msgs[death:])
	})
	dbirth := msgs[death+birth]
	if len(dbirth.p.Metrics) != 1 || dbirth.p.Metrics[0].GetName() != "Speed" || dbirth.p.Metrics[0].GetIsNull() ||
		dbirth.p.Metrics[0].GetProperties().GetValues()[0].GetIntValue() != 192 {
		t.Fatalf("Pump2's DBIRTH after its gateway came back: %v, want Speed's current good value", dbirth.p.Metrics)
	}
	spSeqContinuous(t, msgs)
	if slices.ContainsFunc(msgs, func(m spMessage) bool { return m.kind == "NDEATH" || m.kind == "NBIRTH" && m.p.GetSeq() != 0 }) ||
		len(slices.DeleteFunc(slices.Clone(msgs), func(m spMessage) bool { return m.kind != "NBIRTH" })) != 1 {
		t.Fatalf("the node's session did not go on through the device's death and birth: %s", kinds(msgs))
	}
	t.Logf("around the gateway's crash: %s", kinds(msgs[max(death-3, 0):min(death+birth+4, len(msgs))]))
}

// clusterEnqueuer is a tag history forwarder's way into a test's cluster:
// each batch is POSTed to a running node, as a producer would, with its
// Content-Type and its id as Idempotency-Key (a node that fails it is
// left for the next; the forwarder retries the same batch). It records
// every batch the cluster acknowledged: the exact set of values in the
// buffer.
type clusterEnqueuer struct {
	c      *testcluster.Cluster
	mu     sync.Mutex
	node   int
	acked  map[string]*sparkplugpb.Payload
	values int
}

func (e *clusterEnqueuer) Enqueue(ctx context.Context, target string, payload []byte, id string, headers []storeforward.Header) (storeforward.EnqueueResult, error) {
	e.mu.Lock()
	n := e.c.Nodes[e.node%len(e.c.Nodes)]
	e.mu.Unlock()
	fail := func(err error) (storeforward.EnqueueResult, error) {
		e.mu.Lock()
		e.node++
		e.mu.Unlock()
		return storeforward.EnqueueResult{}, fmt.Errorf("enqueue %s on %s: %w", id, n.ID, err)
	}
	if !n.Running() {
		return fail(errors.New("not running"))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+n.HTTPAddr+"/v1/sf/"+target, bytes.NewReader(payload))
	if err != nil {
		return fail(err)
	}
	req.Header.Set(storeforward.HeaderIdempotencyKey, id)
	for _, h := range headers {
		req.Header.Set(h.Key, h.Value)
	}
	resp, err := enqueueClient.Do(req)
	if err != nil {
		return fail(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		return fail(fmt.Errorf("status %d", resp.StatusCode))
	}
	p := &sparkplugpb.Payload{}
	if err := proto.Unmarshal(payload, p); err != nil {
		return storeforward.EnqueueResult{}, fmt.Errorf("acknowledged batch %s: %w", id, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.acked[id] == nil {
		e.acked[id] = p
		e.values += len(p.Metrics)
	}
	return storeforward.EnqueueResult{ID: id}, nil
}

func (e *clusterEnqueuer) ackedValues() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.values
}

// spValue is one tag value as the test tells it apart: its device, its
// attribute and the value (each value of a device is written once).
type spValue struct {
	device, attribute string
	value             uint64
}

// 10,000 tag values through a tag history forwarder into a Sparkplug
// target (Edge Node of a real Mosquitto, primary host online) across a
// SIGKILL of the Active and a restart of the broker: every value in a
// batch the cluster acknowledged arrives in a DDATA of its device (decoded
// with the Tahu proto, its alias declared by that device's DBIRTH of the
// session) or, the first of a device born by a message, in the DBIRTH,
// with its timestamp; again only as the very same value; each
// device's values first arrive in the order they were taken; seq is
// continuous from each NBIRTH.
//
// The values come from storeforward's HistoryForwarder running in the
// test, feeding the cluster through its HTTP enqueue: the forwarder of a
// scadad node holds the values of a batch not yet enqueued in memory, so
// what a SIGKILL takes there was never acknowledged, and the buffer
// shows no payloads; here the enqueue answers are the exact record of
// what the buffer acknowledged.
func TestHistorySparkplugEveryAcknowledgedValueAcrossKillAndBrokerRestart(t *testing.T) {
	broker, host := testcluster.StartRecordedMosquitto(t, testcluster.MosquittoOptions{}, "test-host", "spBv1.0/#")
	spHostState(t, host, true)
	c, active, targets := sfTargetCluster(t, "sf-sparkplug", fmt.Sprintf(
		"{name: uns, kind: mqtt, mqtt: {broker: %q, username: scadad, password_file: %q, sparkplug: {group_id: plant, edge_node: scadad, primary_host: host1}}, timeout: 5s, backoff_floor: 20ms, backoff_max: 500ms, max_in_flight: 1, batch_max_messages: 20}",
		broker.URL, broker.PasswordFile))
	if len(targets) != 1 || targets[0].Kind != "sparkplug" || targets[0].BatchMaxMessages != 20 {
		t.Fatalf("sf targets: %+v", targets)
	}

	const devices, ticks = 5, 2000
	enq := &clusterEnqueuer{c: c, acked: map[string]*sparkplugpb.Payload{}}
	fw, err := storeforward.NewHistoryForwarder(storeforward.HistoryOptions{
		Enqueuer: enq, RetryFloor: 20 * time.Millisecond, RetryMax: 500 * time.Millisecond, Logger: zerolog.Nop(),
		Rules: []storeforward.HistoryRule{{Name: "tanks", Target: "uns", Format: storeforward.HistorySparkplug, MaxBatch: 10, MaxBatchDelay: 100 * time.Millisecond}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = fw.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-stopped })
	base := time.Now().Truncate(time.Millisecond)
	for i := range ticks {
		for d := range devices {
			if !fw.Offer(storeforward.TagUpdate{Instance: fmt.Sprintf("Tank%d", d), Attribute: "Level", Value: int64(i), Quality: "good", Timestamp: base.Add(time.Duration(i) * time.Millisecond)}) {
				t.Fatalf("value %d of Tank%d not taken", i, d)
			}
		}
	}
	const total = devices * ticks
	awaitConnection(t, broker, active, "uns")
	killAndRestartMidStream(t, c, active, broker, func() int64 { return int64(enq.ackedValues()) })
	testwait.ForDetail(t, 60*time.Second, "every value acknowledged", func() (bool, string) {
		return enq.ackedValues() >= total, fmt.Sprintf("%d acknowledged, %d dropped", enq.ackedValues(), fw.Dropped())
	})
	if fw.Dropped() != 0 {
		t.Fatalf("the forwarder dropped %d values", fw.Dropped())
	}

	// What was acknowledged: each value once, with its timestamp.
	want := map[spValue]uint64{}
	enq.mu.Lock()
	for id, p := range enq.acked {
		for _, m := range p.Metrics {
			dev, attr, _ := storeforward.SplitSparkplugMetricName(m.GetName())
			v := spValue{dev, attr, m.GetLongValue()}
			if _, dup := want[v]; dup {
				t.Fatalf("batch %s: %v acknowledged in two batches", id, v)
			}
			want[v] = m.GetTimestamp()
		}
	}
	enq.mu.Unlock()
	if len(want) != total {
		t.Fatalf("%d distinct values acknowledged, want %d", len(want), total)
	}

	var received map[spValue]int
	var births int
	testwait.ForDetail(t, 60*time.Second, "every acknowledged value in a DBIRTH or DDATA", func() (bool, string) {
		received, births = spReceived(t, spDecode(t, host), want)
		var missing []string
		for v := range want {
			if received[v] == 0 && len(missing) < 5 {
				missing = append(missing, fmt.Sprintf("%s/%s=%d", v.device, v.attribute, v.value))
			}
		}
		return len(received) >= total, fmt.Sprintf("%d of %d values received, %d births; acknowledged, not received: %v", len(received), total, births, missing)
	})
	if births < 3 {
		t.Fatalf("%d NBIRTHs, want one before the SIGKILL, one after it and one after the broker's restart", births)
	}
	again := 0
	for _, n := range received {
		again += n - 1
	}
	t.Logf("%d values received (%d again), %d Edge Node sessions", len(received), again, births)
}

// spReceived checks what the host recorded of Edge Node scadad (as
// spWalk does) and returns how often each value arrived (in a DDATA or a
// DBIRTH) and
// how many sessions were born (NBIRTHs of distinct bdSeq): every value one of want with its
// timestamp and type, and each device's values first arriving in
// increasing order (the order the forwarder took them).
func spReceived(t *testing.T, msgs []spMessage, want map[spValue]uint64) (map[spValue]int, int) {
	t.Helper()
	received := map[spValue]int{}
	last := map[string]uint64{} // device → the last value first received
	spWalk(t, msgs, func(i int, device, name string, pm *sparkplugpb.Payload_Metric) {
		v := spValue{device, name, pm.GetLongValue()}
		if ts, ok := want[v]; !ok || ts != pm.GetTimestamp() || pm.GetDatatype() != uint32(sparkplugpb.DataType_Int64) {
			t.Fatalf("message %d: %v at %d (type %d): not a value acknowledged", i, v, pm.GetTimestamp(), pm.GetDatatype())
		}
		received[v]++
		if received[v] == 1 {
			if prev, ok := last[device]; ok && prev > v.value {
				t.Fatalf("%v first arrived after value %d of %s (FIFO broken)", v, prev, device)
			}
			last[device] = v.value
		}
	})
	births := map[int64]bool{}
	for _, m := range msgs {
		if m.kind == "NBIRTH" {
			births[spBdSeq(m.p)] = true
		}
	}
	return received, len(births)
}
