//go:build linux

package sparkplug

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/storeforward"
	"github.com/scadad/scadad/storeforward/mqtttarget"
	"github.com/scadad/scadad/storeforward/sparkplug/sparkplugpb"
)

// seen is one Sparkplug message a subscriber decoded.
type seen struct {
	kind, device string
	p            *sparkplugpb.Payload
}

func (s seen) metric(name string) *sparkplugpb.Payload_Metric {
	for _, m := range s.p.Metrics {
		if m.GetName() == name {
			return m
		}
	}
	return nil
}

// decodeNode decodes what a recorder received of group/edge's topics.
func decodeNode(t *testing.T, rec *testcluster.MQTTRecorder, group, edge string) []seen {
	t.Helper()
	var out []seen
	for _, m := range rec.Messages() {
		parts := strings.Split(m.Topic, "/")
		if len(parts) < 4 || parts[0] != Namespace || parts[1] != group || parts[3] != edge {
			continue
		}
		p := &sparkplugpb.Payload{}
		if err := proto.Unmarshal(m.Payload, p); err != nil {
			t.Fatalf("%s: %v", m.Topic, err)
		}
		s := seen{kind: parts[2], p: p}
		if len(parts) > 4 {
			s.device = parts[4]
		}
		out = append(out, s)
	}
	return out
}

func historyMessage(t *testing.T, id string, values ...storeforward.HistoryValue) *storeforward.Message {
	t.Helper()
	p := &sparkplugpb.Payload{}
	for _, v := range values {
		m := &sparkplugpb.Payload_Metric{Name: proto.String(storeforward.SparkplugMetricName(v.Instance, v.Attribute)), Timestamp: proto.Uint64(uint64(v.Timestamp.UnixMilli()))}
		if err := storeforward.SetSparkplugValue(m, v.Value); err != nil {
			t.Fatal(err)
		}
		p.Metrics = append(p.Metrics, m)
	}
	b, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return &storeforward.Message{ID: id, Payload: b, Headers: []storeforward.Header{{Key: "Content-Type", Value: storeforward.SparkplugContentType}}}
}

// askRebirth publishes, as rec, a host's NCMD Node Control/Rebirth to
// plant/scadad.
func askRebirth(t *testing.T, rec *testcluster.MQTTRecorder) {
	t.Helper()
	cmd, err := proto.Marshal(&sparkplugpb.Payload{Metrics: []*sparkplugpb.Payload_Metric{{Name: proto.String(MetricRebirth),
		Datatype: proto.Uint32(uint32(sparkplugpb.DataType_Boolean)), Value: &sparkplugpb.Payload_Metric_BooleanValue{BooleanValue: true}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Publish(context.Background(), Namespace+"/plant/NCMD/scadad", cmd, false); err != nil {
		t.Fatal(err)
	}
}

type countingBirths struct{ n uint8 }

func (c *countingBirths) NextBirth(context.Context, string) (uint8, error) {
	c.n++
	return c.n - 1, nil
}

// checkSeq fails unless every session (NBIRTH to the next) numbers its
// messages 0, 1, 2, … and every DDATA alias was declared by the session's
// DBIRTH of that device; it returns the bdSeq of each NBIRTH.
func checkSeq(t *testing.T, msgs []seen) []uint64 {
	t.Helper()
	var births []uint64
	var next uint64
	declared := map[string]map[uint64]string{}
	for i, m := range msgs {
		if m.kind == "NDEATH" || m.kind == "NCMD" {
			continue
		}
		if m.kind == "NBIRTH" {
			births = append(births, m.metric(MetricBdSeq).GetLongValue())
			next = 0
			clear(declared)
		}
		if len(births) == 0 {
			t.Fatalf("message %d (%s) before any NBIRTH", i, m.kind)
		}
		if m.p.GetSeq() != next%256 {
			t.Fatalf("message %d (%s %s): seq %d, want %d (continuous from its NBIRTH)", i, m.kind, m.device, m.p.GetSeq(), next%256)
		}
		next++
		switch m.kind {
		case "DBIRTH":
			declared[m.device] = map[uint64]string{}
			for _, pm := range m.p.Metrics {
				declared[m.device][pm.GetAlias()] = pm.GetName()
			}
		case "DDATA":
			for _, pm := range m.p.Metrics {
				if _, ok := declared[m.device][pm.GetAlias()]; !ok || pm.Name != nil {
					t.Fatalf("message %d: DDATA of %s with alias %d (name %q) not declared by its DBIRTH", i, m.device, pm.GetAlias(), pm.GetName())
				}
			}
		}
	}
	return births
}

// waitPublished waits until rec has received of plant/scadad the
// messages want lists ("KIND" or "KIND/device", space-separated; NCMDs
// left out), checks their seq and returns them.
func waitPublished(t *testing.T, rec *testcluster.MQTTRecorder, want string) []seen {
	t.Helper()
	var msgs []seen
	testwait.ForDetail(t, 10*time.Second, want, func() (bool, string) {
		msgs = decodeNode(t, rec, "plant", "scadad")
		var kinds []string
		for _, m := range msgs {
			if m.kind == "NCMD" {
				continue
			}
			k := m.kind
			if m.device != "" {
				k += "/" + m.device
			}
			kinds = append(kinds, k)
		}
		got := strings.Join(kinds, " ")
		return got == want, got
	})
	checkSeq(t, msgs)
	return msgs
}

// The Edge Node session against a real Mosquitto: no birth while the
// primary host is offline; NBIRTH, DBIRTH and DDATA with aliases and a
// continuous seq; a new metric re-births its device; a dead connection
// leaves its NDEATH (the will, with the session's bdSeq) and the next
// session births with the next bdSeq; the host going offline ends the
// session with the node's own NDEATH.
func TestEdgeNodeSessionOnARealBroker(t *testing.T) {
	broker, rec := testcluster.StartRecordedMosquitto(t, testcluster.MosquittoOptions{}, "test-host", Namespace+"/#")
	ctx := context.Background()
	state := func(online bool) {
		t.Helper()
		if err := rec.Publish(ctx, Namespace+"/STATE/host1", fmt.Appendf(nil, `{"online": %v, "timestamp": %d}`, online, time.Now().UnixMilli()), true); err != nil {
			t.Fatal(err)
		}
	}
	state(false)

	target := storeforward.Target{Name: "edge", Settings: Settings{
		Connection: mqtttarget.Settings{Broker: broker.URL, Username: broker.Username, PasswordFile: broker.PasswordFile},
		GroupID:    "plant", EdgeNode: "scadad", PrimaryHost: "host1",
		Devices: []Device{{Name: "Pump1", Metrics: []Metric{{Name: "Speed", Type: sparkplugpb.DataType_Double}, {Name: "Running", Type: sparkplugpb.DataType_Boolean}}}},
	}}
	kind := Kind{Births: &countingBirths{}}
	if err := kind.Validate(target); err != nil {
		t.Fatal(err)
	}
	snd, err := kind.NewSender(target, storeforward.SenderEnv{NodeID: "node-a", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	t0 := time.Now().Truncate(time.Millisecond)
	send := func(timeout time.Duration, m *storeforward.Message) error {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return snd.Send(sctx, []*storeforward.Message{m})
	}

	var held *HostOffline
	if err := send(time.Second, historyMessage(t, "m1", storeforward.HistoryValue{Instance: "Pump1", Attribute: "Speed", Value: 1.5, Timestamp: t0})); !errors.As(err, &held) {
		t.Fatalf("send while the primary host is offline: %v, want HostOffline", err)
	}
	if msgs := decodeNode(t, rec, "plant", "scadad"); len(msgs) != 0 {
		t.Fatalf("published while the primary host is offline: %+v", msgs)
	}
	state(true)
	if err := send(5*time.Second, historyMessage(t, "m1", storeforward.HistoryValue{Instance: "Pump1", Attribute: "Speed", Value: 1.5, Timestamp: t0})); err != nil {
		t.Fatal(err)
	}
	// A metric the settings did not list: its device is born again with it.
	if err := send(5*time.Second, historyMessage(t, "m2", storeforward.HistoryValue{Instance: "Pump1", Attribute: "Torque", Value: int32(7), Timestamp: t0},
		storeforward.HistoryValue{Instance: "Pump1", Attribute: "Speed", Value: 2.5, Timestamp: t0})); err != nil {
		t.Fatal(err)
	}
	var msgs []seen
	testwait.For(t, 5*time.Second, "NBIRTH, DBIRTH, DBIRTH, DDATA", func() bool {
		msgs = decodeNode(t, rec, "plant", "scadad")
		return len(msgs) >= 4
	})
	kinds := []string{}
	for _, m := range msgs {
		kinds = append(kinds, m.kind)
	}
	if strings.Join(kinds, " ") != "NBIRTH DBIRTH DBIRTH DDATA" {
		t.Fatalf("published %v", kinds)
	}
	if births := checkSeq(t, msgs); len(births) != 1 || births[0] != 0 {
		t.Fatalf("NBIRTH bdSeqs %v, want [0]", births)
	}
	// The device is born by its first values, which its DBIRTH carries.
	if m := msgs[1].metric("Speed"); m == nil || m.GetAlias() != 1 || m.GetDatatype() != uint32(sparkplugpb.DataType_Double) ||
		m.GetDoubleValue() != 1.5 || m.GetTimestamp() != uint64(t0.UnixMilli()) || !msgs[1].metric("Running").GetIsNull() {
		t.Fatalf("DBIRTH %v: want Speed alias 1, Double, 1.5, and Running null before any value", msgs[1].p.Metrics)
	}
	if m := msgs[2].metric("Torque"); m == nil || m.GetAlias() != 3 || msgs[2].metric("Speed").GetDoubleValue() != 1.5 {
		t.Fatalf("second DBIRTH %v: want Torque as alias 3 and Speed's last value", msgs[2].p.Metrics)
	}
	if d := msgs[3].p.Metrics; len(d) != 2 || d[0].GetAlias() != 3 || d[0].GetIntValue() != 7 || d[1].GetAlias() != 1 || d[1].GetDoubleValue() != 2.5 {
		t.Fatalf("DDATA %v: want Torque 7 and Speed 2.5 by alias", d)
	}

	// Not a Sparkplug history payload: parked.
	bad := &storeforward.Message{ID: "bad", Payload: []byte(`{"x":1}`), Headers: []storeforward.Header{{Key: "Content-Type", Value: "application/json"}}}
	var r storeforward.Refusal
	if err := send(time.Second, bad); !errors.As(err, &r) || !r.Verdict().Permanent || !r.Verdict().Unsendable {
		t.Fatalf("a JSON message: %v, want a permanent refusal", err)
	}

	// The connection dies (no DISCONNECT): the broker publishes the will.
	s := snd.(*sender)
	s.mu.Lock()
	_ = s.sess.conn.Close()
	s.mu.Unlock()
	testwait.For(t, 10*time.Second, "the will's NDEATH", func() bool {
		msgs = decodeNode(t, rec, "plant", "scadad")
		return msgs[len(msgs)-1].kind == "NDEATH"
	})
	if b := msgs[len(msgs)-1].metric(MetricBdSeq); b == nil || b.GetLongValue() != 0 {
		t.Fatalf("NDEATH %v: want bdSeq 0", msgs[len(msgs)-1].p)
	}
	// The next Send may find the dead session first; the one after births.
	testwait.For(t, 10*time.Second, "a send in a new session", func() bool {
		return send(5*time.Second, historyMessage(t, "m3", storeforward.HistoryValue{Instance: "Pump1", Attribute: "Speed", Value: 3.5, Timestamp: t0})) == nil
	})
	testwait.For(t, 5*time.Second, "the second session's DDATA", func() bool {
		msgs = decodeNode(t, rec, "plant", "scadad")
		return msgs[len(msgs)-1].kind == "DDATA"
	})
	if births := checkSeq(t, msgs); len(births) != 2 || births[1] != 1 {
		t.Fatalf("NBIRTH bdSeqs %v, want [0 1]", births)
	}

	// A host asks for a rebirth (NCMD): the births again, same bdSeq.
	askRebirth(t, rec)
	before := len(msgs)
	testwait.For(t, 10*time.Second, "a rebirth", func() bool {
		if err := send(5*time.Second, historyMessage(t, "m3b", storeforward.HistoryValue{Instance: "Pump1", Attribute: "Speed", Value: 3.75, Timestamp: t0})); err != nil {
			t.Fatal(err)
		}
		msgs = decodeNode(t, rec, "plant", "scadad")
		return slices.ContainsFunc(msgs[before:], func(m seen) bool { return m.kind == "NBIRTH" })
	})
	if births := checkSeq(t, msgs); births[len(births)-1] != 1 {
		t.Fatalf("NBIRTH bdSeqs %v: a rebirth keeps the session's bdSeq 1", births)
	}

	// The primary host goes offline: the node ends its session itself
	// (a send may still go out before the node hears of it).
	state(false)
	testwait.For(t, 10*time.Second, "the send held and the node's NDEATH", func() bool {
		err := send(time.Second, historyMessage(t, "m4", storeforward.HistoryValue{Instance: "Pump1", Attribute: "Speed", Value: 4.0, Timestamp: t0}))
		msgs = decodeNode(t, rec, "plant", "scadad")
		return errors.As(err, &held) && msgs[len(msgs)-1].kind == "NDEATH"
	})
	if b := msgs[len(msgs)-1].metric(MetricBdSeq); b.GetLongValue() != 1 {
		t.Fatalf("NDEATH of the second session: bdSeq %d, want 1", b.GetLongValue())
	}
	if err := send(time.Second, historyMessage(t, "m5", storeforward.HistoryValue{Instance: "Pump1", Attribute: "Speed", Value: 4.5, Timestamp: t0})); !errors.As(err, &held) {
		t.Fatalf("send after the host went offline: %v, want HostOffline", err)
	}
	time.Sleep(200 * time.Millisecond) // a publish would have arrived by now
	msgs = decodeNode(t, rec, "plant", "scadad")
	for _, m := range msgs {
		if m.kind == "DDATA" && m.p.Metrics[0].GetDoubleValue() == 4.5 {
			t.Fatal("published while the primary host is offline")
		}
	}
}

// A device the settings no longer list (its instance removed by a deploy,
// which starts a new session without it) whose values are still in the
// buffer: its DBIRTH (with its first values), its DDATA, then, before the first batch without
// values of it, its DDEATH (seq continuing, with a
// timestamp), so a host application sees it go offline instead of staying
// online for the rest of the session; a rebirth of the node does not
// birth it again, and later values of it birth it again first.
func TestRemovedDeviceDiesAfterItsLastValues(t *testing.T) {
	broker, rec := testcluster.StartRecordedMosquitto(t, testcluster.MosquittoOptions{}, "test-host", Namespace+"/#")
	target := storeforward.Target{Name: "edge", Settings: Settings{
		Connection: mqtttarget.Settings{Broker: broker.URL, Username: broker.Username, PasswordFile: broker.PasswordFile},
		GroupID:    "plant", EdgeNode: "scadad",
		Devices: []Device{{Name: "Pump1", Metrics: []Metric{{Name: "Speed", Type: sparkplugpb.DataType_Double}}}},
	}}
	kind := Kind{Births: &countingBirths{}}
	snd, err := kind.NewSender(target, storeforward.SenderEnv{NodeID: "node-a", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	t0 := time.Now().Truncate(time.Millisecond)
	val := func(inst string, v float64) storeforward.HistoryValue {
		return storeforward.HistoryValue{Instance: inst, Attribute: "Speed", Value: v, Timestamp: t0}
	}
	send := func(m *storeforward.Message) {
		t.Helper()
		if err := snd.Send(ctx, []*storeforward.Message{m}); err != nil {
			t.Fatal(err)
		}
	}
	send(historyMessage(t, "m1", val("Pump1", 1), val("Pump9", 9)))
	send(historyMessage(t, "m2", val("Pump9", 8)))
	send(historyMessage(t, "m3", val("Pump1", 2)))
	// The host asks for a rebirth: Pump9 is not born again.
	askRebirth(t, rec)
	s := snd.(*sender)
	testwait.For(t, 5*time.Second, "the rebirth request received", func() bool {
		s.sess.mu.Lock()
		defer s.sess.mu.Unlock()
		return s.sess.rebirth
	})
	send(historyMessage(t, "m4", val("Pump9", 10)))
	send(historyMessage(t, "m5", val("Pump1", 3)))
	want := "NBIRTH DBIRTH/Pump1 DBIRTH/Pump9 DDATA/Pump9 DDEATH/Pump9 DDATA/Pump1 " +
		"NBIRTH DBIRTH/Pump1 DBIRTH/Pump9 DDEATH/Pump9 DDATA/Pump1"
	msgs := waitPublished(t, rec, want)
	for _, m := range msgs {
		if m.kind == "DDEATH" && (m.p.Timestamp == nil || m.p.Seq == nil || len(m.p.Metrics) != 0) {
			t.Fatalf("DDEATH %v: want a timestamp, a seq and no metrics", m.p)
		}
	}
}

// withQuality sets the OPC DA quality property of every metric of m (a
// historyMessage) whose value is null, as the history forwarder encodes a
// value its field source marked bad.
func withQuality(t *testing.T, m *storeforward.Message, quality int32) *storeforward.Message {
	t.Helper()
	p := &sparkplugpb.Payload{}
	if err := proto.Unmarshal(m.Payload, p); err != nil {
		t.Fatal(err)
	}
	for _, pm := range p.Metrics {
		if pm.GetIsNull() {
			pm.Properties = &sparkplugpb.Payload_PropertySet{Keys: []string{storeforward.SparkplugQualityProperty},
				Values: []*sparkplugpb.Payload_PropertyValue{{Type: proto.Uint32(uint32(sparkplugpb.DataType_Int32)),
					Value: &sparkplugpb.Payload_PropertyValue_IntValue{IntValue: uint32(quality)}}}}
		}
	}
	b, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	m.Payload = b
	return m
}

// An instance's field connection goes bad (every value of it null with
// quality communication failure or not connected): its DDEATH in the
// session, nothing of it while its source stays lost, and its DBIRTH with
// its current values once a good value comes; one bad attribute among
// good ones is data, not a death. A new sender (the next Active node)
// whose first messages say the source is lost does not birth the device.
func TestDeviceDiesWhileItsSourceIsLost(t *testing.T) {
	broker, rec := testcluster.StartRecordedMosquitto(t, testcluster.MosquittoOptions{}, "test-host", Namespace+"/#")
	target := storeforward.Target{Name: "edge", Settings: Settings{
		Connection: mqtttarget.Settings{Broker: broker.URL, Username: broker.Username, PasswordFile: broker.PasswordFile},
		GroupID:    "plant", EdgeNode: "scadad",
		Devices: []Device{
			{Name: "Pump1", Metrics: []Metric{{Name: "Speed", Type: sparkplugpb.DataType_Double}}},
			{Name: "Pump2", Metrics: []Metric{{Name: "Speed", Type: sparkplugpb.DataType_Double}, {Name: "Flow", Type: sparkplugpb.DataType_Double}}},
		},
	}}
	births := &countingBirths{}
	kind := Kind{Births: births}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Now().Truncate(time.Millisecond)
	val := func(inst, attr string, v any) storeforward.HistoryValue {
		return storeforward.HistoryValue{Instance: inst, Attribute: attr, Value: v, Timestamp: t0}
	}
	newSender := func() storeforward.Sender {
		t.Helper()
		snd, err := kind.NewSender(target, storeforward.SenderEnv{NodeID: "node-a", Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		return snd
	}
	snd := newSender()
	send := func(id string, quality int32, values ...storeforward.HistoryValue) {
		t.Helper()
		if err := snd.Send(ctx, []*storeforward.Message{withQuality(t, historyMessage(t, id, values...), quality)}); err != nil {
			t.Fatal(err)
		}
	}
	send("m1", 0, val("Pump1", "Speed", 1.0), val("Pump2", "Speed", 2.0), val("Pump2", "Flow", 3.0))
	send("m2", 0x18, val("Pump2", "Flow", nil))                                                          // one attribute bad: data
	send("m3", 0x18, val("Pump1", "Speed", 1.5), val("Pump2", "Speed", 2.5), val("Pump2", "Speed", nil)) // Pump2's connection lost
	send("m4", 0x18, val("Pump2", "Speed", nil), val("Pump2", "Flow", nil), val("Pump1", "Speed", 1.75)) // still lost (a sample rule)
	send("m5", 0, val("Pump2", "Flow", 3.5), val("Pump2", "Flow", 3.75), val("Pump2", "Speed", 2.75))    // back
	send("m6", 0x08, val("Pump2", "Speed", nil), val("Pump2", "Flow", nil))                              // its connection removed by a deploy
	snd.Close()

	// The next Active node: the same messages from m6 on, then Pump1's.
	snd = newSender()
	defer snd.Close()
	send("m6", 0x08, val("Pump2", "Speed", nil), val("Pump2", "Flow", nil))
	send("m7", 0, val("Pump1", "Speed", 1.875))

	want := "NBIRTH DBIRTH/Pump1 DBIRTH/Pump2 DDATA/Pump2 DDATA/Pump1 DDATA/Pump2 DDEATH/Pump2 DDATA/Pump1 DBIRTH/Pump2 DDATA/Pump2 DDEATH/Pump2 NDEATH " +
		"NBIRTH DBIRTH/Pump1"
	msgs := waitPublished(t, rec, want)
	// m3: Pump2's good value before the loss still goes out, then its death.
	if d := msgs[5].p.Metrics; len(d) != 1 || d[0].GetDoubleValue() != 2.5 {
		t.Fatalf("DDATA of Pump2 before its DDEATH: %v, want Speed 2.5 alone", d)
	}
	// m5: the DBIRTH holds each metric's first value back, the DDATA the later one.
	if b := msgs[8]; b.metric("Flow").GetDoubleValue() != 3.5 || b.metric("Speed").GetDoubleValue() != 2.75 {
		t.Fatalf("DBIRTH of Pump2 back: %v, want Flow 3.5 and Speed 2.75", b.p.Metrics)
	}
	if d := msgs[9].p.Metrics; len(d) != 1 || d[0].GetDoubleValue() != 3.75 {
		t.Fatalf("DDATA after the DBIRTH: %v, want Flow 3.75", d)
	}
	// The new session's DBIRTH of Pump1 is born by m7's value.
	if b := msgs[13]; b.metric("Speed").GetDoubleValue() != 1.875 {
		t.Fatalf("the new session's DBIRTH of Pump1: %v, want Speed 1.875", b.p.Metrics)
	}
}
