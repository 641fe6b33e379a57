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
	testwait.For(t, 5*time.Second, "NBIRTH, DBIRTH, DDATA, DBIRTH, DDATA", func() bool {
		msgs = decodeNode(t, rec, "plant", "scadad")
		return len(msgs) >= 5
	})
	kinds := []string{}
	for _, m := range msgs {
		kinds = append(kinds, m.kind)
	}
	if strings.Join(kinds, " ") != "NBIRTH DBIRTH DDATA DBIRTH DDATA" {
		t.Fatalf("published %v", kinds)
	}
	if births := checkSeq(t, msgs); len(births) != 1 || births[0] != 0 {
		t.Fatalf("NBIRTH bdSeqs %v, want [0]", births)
	}
	if m := msgs[1].metric("Speed"); m == nil || m.GetAlias() != 1 || m.GetDatatype() != uint32(sparkplugpb.DataType_Double) || !m.GetIsNull() {
		t.Fatalf("DBIRTH Speed %v: want alias 1, Double, null before any value", m)
	}
	if d := msgs[2].p.Metrics; len(d) != 1 || d[0].GetAlias() != 1 || d[0].GetDoubleValue() != 1.5 || d[0].GetTimestamp() != uint64(t0.UnixMilli()) {
		t.Fatalf("DDATA %v", d)
	}
	if m := msgs[3].metric("Torque"); m == nil || m.GetAlias() != 3 || msgs[3].metric("Speed").GetDoubleValue() != 1.5 {
		t.Fatalf("second DBIRTH %v: want Torque as alias 3 and Speed's last value", msgs[3].p.Metrics)
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
// buffer: its DBIRTH, its DDATA, then, before the first batch without
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
	want := "NBIRTH DBIRTH/Pump1 DDATA/Pump1 DBIRTH/Pump9 DDATA/Pump9 DDATA/Pump9 DDEATH/Pump9 DDATA/Pump1 " +
		"NBIRTH DBIRTH/Pump1 DBIRTH/Pump9 DDATA/Pump9 DDEATH/Pump9 DDATA/Pump1"
	var msgs []seen
	var got string
	testwait.ForDetail(t, 5*time.Second, want, func() (bool, string) {
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
		got = strings.Join(kinds, " ")
		return got == want, got
	})
	checkSeq(t, msgs)
	for _, m := range msgs {
		if m.kind == "DDEATH" && (m.p.Timestamp == nil || m.p.Seq == nil || len(m.p.Metrics) != 0) {
			t.Fatalf("DDEATH %v: want a timestamp, a seq and no metrics", m.p)
		}
	}
}
