package storeforward

import (
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/scadad/scadad/internal/clock/clocktest"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/storeforward/sparkplug/sparkplugpb"
)

// A sparkplug rule stores Sparkplug B payloads (one metric per value,
// named instance/attribute, with its type, source time and quality) with
// their content type, split like JSON ones when over the payload limit.
func TestHistorySparkplugFormat(t *testing.T) {
	f := newFSM(t, true)
	e, err := NewEnqueuer(EnqueuerOptions{Proposer: &applyProposer{f: f},
		Targets: StaticTargets{"edge": {Name: "edge", URL: "http://x", MaxPayloadBytes: 200}}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	fwd := startHistory(t, HistoryOptions{Enqueuer: e, Clock: clocktest.New(t0),
		Rules: []HistoryRule{{Name: "r", Target: "edge", MaxBatch: 8, MaxBatchDelay: time.Hour, Format: HistorySparkplug}}})
	values := []any{true, int32(-7), int64(1) << 60, float32(1.5), math.NaN(), "text", 2.5, int32(3)}
	for i, v := range values {
		offerAll(t, fwd, TagUpdate{Instance: "Pump1", Attribute: "A" + string(rune('0'+i)), Value: v, Quality: "bad(0x18)", Timestamp: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	var got []*sparkplugpb.Payload_Metric
	testwait.For(t, 5*time.Second, "every value stored", func() bool {
		msgs, err := f.SFPending("edge", 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, m := range msgs {
			if len(m.Payload) > 200 {
				t.Fatalf("stored a %d-byte payload over the 200-byte limit", len(m.Payload))
			}
			if len(m.Headers) != 1 || m.Headers[0].Value != SparkplugContentType {
				t.Fatalf("headers %v, want Content-Type %s", m.Headers, SparkplugContentType)
			}
			p := &sparkplugpb.Payload{}
			if err := proto.Unmarshal(m.Payload, p); err != nil {
				t.Fatalf("stored payload: %v", err)
			}
			if p.Seq != nil || p.Timestamp != nil {
				t.Fatalf("stored payload has seq %v timestamp %v: the target sets those", p.Seq, p.Timestamp)
			}
			got = append(got, p.Metrics...)
		}
		return len(got) >= len(values)
	})
	if len(got) != len(values) {
		t.Fatalf("%d metrics stored, want %d", len(got), len(values))
	}
	wantTypes := []sparkplugpb.DataType{sparkplugpb.DataType_Boolean, sparkplugpb.DataType_Int32, sparkplugpb.DataType_Int64,
		sparkplugpb.DataType_Float, sparkplugpb.DataType_Double, sparkplugpb.DataType_String, sparkplugpb.DataType_Double, sparkplugpb.DataType_Int32}
	for i, m := range got {
		if want := "Pump1/A" + string(rune('0'+i)); m.GetName() != want {
			t.Errorf("metric %d named %q, want %q (in order)", i, m.GetName(), want)
		}
		if m.GetDatatype() != uint32(wantTypes[i]) {
			t.Errorf("metric %s datatype %d, want %s", m.GetName(), m.GetDatatype(), wantTypes[i])
		}
		if m.GetTimestamp() != uint64(t0.Add(time.Duration(i)*time.Millisecond).UnixMilli()) {
			t.Errorf("metric %s timestamp %d", m.GetName(), m.GetTimestamp())
		}
		if ps := m.GetProperties(); len(ps.GetKeys()) != 1 || ps.GetKeys()[0] != SparkplugQualityProperty || ps.GetValues()[0].GetIntValue() != 0x18 {
			t.Errorf("metric %s properties %v, want Quality 0x18", m.GetName(), ps)
		}
	}
	if got[1].GetIntValue() != uint32(0xfffffff9) || got[2].GetLongValue() != 1<<60 || !math.IsNaN(got[4].GetDoubleValue()) || got[5].GetStringValue() != "text" {
		t.Errorf("values %v", got)
	}
}

// A value the field source marks lost (null, quality communication
// failure or not connected, with or without limit bits) reads as a lost
// source in its Sparkplug metric; a value, or another bad quality, not.
func TestSparkplugSourceLost(t *testing.T) {
	for _, c := range []struct {
		value   any
		quality string
		lost    bool
	}{
		{nil, "bad(0x18)", true},
		{nil, "bad(0x08)", true},
		{nil, "bad(0x1b)", true},
		{nil, "bad(0x04)", false},
		{nil, "bad(0x1c)", false},
		{nil, "good", false},
		{1.5, "bad(0x18)", false},
		{1.5, "good", false},
	} {
		m, err := sparkplugMetric(HistoryValue{Instance: "Pump1", Attribute: "Speed", Value: c.value, Quality: c.quality, Timestamp: t0})
		if err != nil {
			t.Fatal(err)
		}
		if got := SparkplugSourceLost(m); got != c.lost {
			t.Errorf("value %v quality %s: source lost %v, want %v", c.value, c.quality, got, c.lost)
		}
	}
	if SparkplugSourceLost(&sparkplugpb.Payload_Metric{IsNull: proto.Bool(true)}) {
		t.Error("a null metric without a quality reads as a lost source")
	}
}
