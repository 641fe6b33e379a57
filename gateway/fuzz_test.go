package gateway

import (
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/scadad/scadad/gateway/gatewaypb"
)

type recordingHandler struct{ changes []DataChange }

func (h *recordingHandler) DataChange(d DataChange) { h.changes = append(h.changes, d) }
func (h *recordingHandler) ConnectionState(State)   {}

// FuzzGatewayMessages decodes arbitrary bytes as each message the gateway
// sends (event, command reply, session reply) and runs them through what
// the client does with them: routing a data change by its handle (or
// keeping it, bounded, until its handle is known), mapping a bulk reply's
// items to the tags asked for, converting values and timestamps. Nothing
// may panic, the early buffer stays within maxEarly, and a routed change
// carries the tag its handle was remembered for.
// Run: go test ./gateway -run '^$' -fuzz FuzzGatewayMessages -fuzztime 30s
func FuzzGatewayMessages(f *testing.F) {
	for _, m := range []proto.Message{
		&pb.MxEvent{Kind: &pb.MxEvent_DataChange{DataChange: &pb.DataChange{ItemHandle: 7, TagAddress: "Tank1.Level",
			Value: &pb.Value{Kind: &pb.Value_DoubleValue{DoubleValue: 1.5}}, Quality: 0xC0}}},
		&pb.MxCommandReply{SessionId: "s", Result: &pb.MxCommandReply_SubscribeBulk{SubscribeBulk: &pb.SubscribeBulkReply{
			Items: []*pb.ItemStatus{{TagAddress: "a", ItemHandle: 7, Ok: true}, {TagAddress: "b", Error: "no such tag"}}}}},
		&pb.OpenSessionReply{SessionId: "s"},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x80, 0x80, 0x80, 0x80, 0x08})
	f.Fuzz(func(t *testing.T, data []byte) {
		h := &recordingHandler{}
		c := &Client{cfg: Config{Handler: h}}
		s := &liveSession{handles: map[int32]string{7: "Tank1.Level"}, early: map[int32]*pb.DataChange{}, lost: make(chan struct{})}

		var ev pb.MxEvent
		if proto.Unmarshal(data, &ev) == nil {
			if d := ev.GetDataChange(); d != nil {
				c.deliver(s, d)
				if d.GetItemHandle() == 7 && (len(h.changes) != 1 || h.changes[0].Tag != "Tank1.Level") {
					t.Fatalf("a change for handle 7 was routed as %+v", h.changes)
				}
				v := ValueFromProto(d.GetValue())
				if back, err := ValueToProto(v); err != nil || !proto.Equal(back, normalValue(d.GetValue())) {
					t.Fatalf("value %v does not round-trip: %v, %v", d.GetValue(), back, err)
				}
			}
		}
		if len(s.early) > maxEarly {
			t.Fatalf("early buffer holds %d", len(s.early))
		}
		var reply pb.MxCommandReply
		if proto.Unmarshal(data, &reply) == nil {
			_ = CommandKind(&pb.MxCommand{})
			if items := reply.GetSubscribeBulk().GetItems(); len(items) > 0 {
				tags := make([]string, len(items))
				for i := range tags {
					tags[i] = "tag" + string(rune('a'+i%26))
				}
				if _, err := c.mapItems(s, tags, items); err != nil {
					t.Fatalf("map %d items to %d tags: %v", len(items), len(tags), err)
				}
				if _, err := c.mapItems(s, tags[1:], items); err == nil {
					t.Fatal("a reply with more items than tags was accepted")
				}
			}
		}
		var open pb.OpenSessionReply
		_ = proto.Unmarshal(data, &open)
	})
}

// normalValue is v as ValueToProto writes it back: an unset value is an
// empty one, and unknown fields are gone.
func normalValue(v *pb.Value) *pb.Value {
	if v == nil || v.GetKind() == nil {
		return &pb.Value{}
	}
	// Fields this build does not know (a newer gateway's) carry nothing
	// the client reads: the round trip drops them.
	if len(v.ProtoReflect().GetUnknown()) > 0 {
		v = proto.Clone(v).(*pb.Value)
		v.ProtoReflect().SetUnknown(nil)
	}
	return v
}
