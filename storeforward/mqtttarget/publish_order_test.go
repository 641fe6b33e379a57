package mqtttarget

import (
	"bytes"
	"testing"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
)

// publishedID finds the message id in publishes as paho.golang writes
// them, whatever other properties come with it, and nothing in other
// packets or in a publish without one.
func TestPublishedIDReadsWhatPahoWrites(t *testing.T) {
	expiry, alias := uint32(60), uint16(3)
	for _, tc := range []struct {
		name string
		pub  paho.Publish
		want string
	}{
		{"qos 1, id alone", paho.Publish{QoS: 1, Topic: "plant/hist", Properties: userProps(UserPropertyMessageID, "m-1")}, "m-1"},
		{"qos 0", paho.Publish{QoS: 0, Topic: "t", Properties: userProps(UserPropertyMessageID, "m-2")}, "m-2"},
		{"after other properties", paho.Publish{QoS: 1, Topic: "a/b", PacketID: 9, Payload: []byte("message-id"), Properties: &paho.PublishProperties{
			ContentType: "application/json", MessageExpiry: &expiry, TopicAlias: &alias, CorrelationData: []byte{0, 1, 2},
			ResponseTopic: "r", User: paho.UserProperties{{Key: "site", Value: "north"}, {Key: UserPropertyMessageID, Value: "m-3"}}}}, "m-3"},
		{"no id", paho.Publish{QoS: 1, Topic: "t", Payload: []byte("\x26\x00\x0amessage-id\x00\x01x"), Properties: userProps("other", "v")}, ""},
	} {
		var b bytes.Buffer
		if _, err := tc.pub.Packet().WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		id, ok := publishedID(b.Bytes())
		if id != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: publishedID = %q, %v; want %q", tc.name, id, ok, tc.want)
		}
		size, ok := packetSize(b.Bytes())
		if !ok || size != b.Len() {
			t.Errorf("%s: packetSize = %d, %v; want %d", tc.name, size, ok, b.Len())
		}
	}
	var ping bytes.Buffer
	if _, err := packets.NewControlPacket(packets.PINGREQ).WriteTo(&ping); err != nil {
		t.Fatal(err)
	}
	if id, ok := publishedID(ping.Bytes()); ok {
		t.Errorf("PINGREQ read as a publish of %q", id)
	}
}

func userProps(key, value string) *paho.PublishProperties {
	return &paho.PublishProperties{User: paho.UserProperties{{Key: key, Value: value}}}
}

// No byte string makes publishedID or packetSize fail other than by
// saying no.
func FuzzPublishedID(f *testing.F) {
	var b bytes.Buffer
	_, _ = (&paho.Publish{QoS: 1, Topic: "t", Properties: userProps(UserPropertyMessageID, "m")}).Packet().WriteTo(&b)
	f.Add(b.Bytes())
	f.Add([]byte{0x30})
	f.Add([]byte{0x32, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, p []byte) {
		publishedID(p)
		packetSize(p)
	})
}
