package mqtttarget

import (
	"bytes"
	"testing"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
)

// packetSize reads the length of packets as paho.golang writes them, a
// remaining length of one to three bytes among them, and says no to a
// header that is cut short.
func TestPacketSizeReadsWhatPahoWrites(t *testing.T) {
	var ping bytes.Buffer
	if _, err := packets.NewControlPacket(packets.PINGREQ).WriteTo(&ping); err != nil {
		t.Fatal(err)
	}
	cases := [][]byte{ping.Bytes()}
	for _, n := range []int{0, 100, 300, 20000} {
		var b bytes.Buffer
		if _, err := (&paho.Publish{QoS: 1, Topic: "plant/hist", Payload: make([]byte, n),
			Properties: &paho.PublishProperties{User: paho.UserProperties{{Key: UserPropertyMessageID, Value: "m"}}}}).Packet().WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, b.Bytes())
	}
	for _, p := range cases {
		if size, ok := packetSize(p); !ok || size != len(p) {
			t.Errorf("packet of %d bytes (type %d): packetSize = %d, %v", len(p), p[0]>>4, size, ok)
		}
		if _, ok := packetSize(p[:1]); ok {
			t.Errorf("packet of %d bytes: a lone type byte read as a header", len(p))
		}
	}
	if _, ok := packetSize([]byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x01}); ok {
		t.Error("a remaining length of five bytes read as a header")
	}
}
