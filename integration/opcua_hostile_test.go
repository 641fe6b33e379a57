package integration

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/internal/testcluster"
)

// TestOPCUAMalformedRequestsDoNotKillTheServer sends, over a plain
// (security None) channel and before any session, requests whose length
// fields would make gopcua's decoder allocate gigabytes or panic on a
// goroutine nothing recovers: either ended the whole scadad process (the
// first with v0.9.0, the second with v0.9.1; WORKAROUNDS.md row 18). The
// Active must go on serving, as Active.
func TestOPCUAMalformedRequestsDoNotKillTheServer(t *testing.T) {
	sim, c, active, standby := opcuaPair(t)
	deploySite(t, c, testcluster.SiteConfigGateway("hostile", sim.Addr, map[string]string{"sink": "http://127.0.0.1:9/x"}, 5))
	waitRedundancyLevels(t, active, standby, "")

	header := &ua.RequestHeader{AuthenticationToken: ua.NewTwoByteNodeID(0), Timestamp: time.Now(), AdditionalHeader: ua.NewExtensionObject(nil)}
	// GetEndpoints declaring 2^31-1 locale ids and carrying none.
	hugeArray := encodeRequest(t, &ua.GetEndpointsRequest{RequestHeader: header, EndpointURL: active.OPCUA})
	hugeArray = binary.LittleEndian.AppendUint32(hugeArray[:len(hugeArray)-8], 0x7FFFFFFF)
	// A Write whose value is a Double array of length -2.
	write := &ua.WriteRequest{RequestHeader: header, NodesToWrite: []*ua.WriteValue{{NodeID: ua.NewStringNodeID(1, "Pump1.SpeedSP"),
		AttributeID: ua.AttributeIDValue, Value: &ua.DataValue{EncodingMask: ua.DataValueValue, Value: ua.MustVariant([]float64{1})}}}}
	negative := encodeRequest(t, write)
	at := bytes.Index(negative, []byte{0x8B, 1, 0, 0, 0}) // Double array, one element
	if at < 0 {
		t.Fatal("no Double array in the encoded Write")
	}
	binary.LittleEndian.PutUint32(negative[at+1:], 0xFFFFFFFE)

	dims := encodeRequest(t, write)
	at = bytes.Index(dims, []byte{0x8B, 1, 0, 0, 0})
	dims[at] = 0xCB // with dimensions
	dims = append(dims[:at+13], append([]byte{0xFF, 0xFF, 0xFF, 0x7F}, dims[at+13:]...)...)
	for _, tc := range []struct {
		name string
		body []byte
	}{{"an array of 2^31-1 strings", hugeArray}, {"a variant array of length -2", negative}, {"a variant of 2^31-1 dimensions", dims}} {
		sendPlainRequest(t, active.OPCUA, tc.body)
		if !active.Running() {
			t.Fatalf("%s killed the Active's process", tc.name)
		}
		waitFor(t, 10*time.Second, "ServiceLevel 250 on the Active after "+tc.name, func() bool { return serviceLevel(active.OPCUA) == 250 })
		if !active.Running() {
			t.Fatalf("%s killed the Active's process", tc.name)
		}
	}
}

// encodeRequest is req's body on the wire: its type id, then the request.
func encodeRequest(t *testing.T, req any) []byte {
	t.Helper()
	id, err := ua.NewFourByteNodeID(0, ua.ServiceTypeID(req)).Encode()
	if err != nil {
		t.Fatal(err)
	}
	b, err := ua.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	return append(id, b...)
}

func uacpFrame(typ string, body []byte) []byte {
	b := append([]byte(typ), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(b[4:], uint32(8+len(body)))
	return append(b, body...)
}

// sendPlainRequest opens a security-None channel to endpoint by hand and
// sends body as its first request; it waits up to 3 s for anything back.
func sendPlainRequest(t *testing.T, endpoint string, body []byte) {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	hello := make([]byte, 0, 64)
	for _, v := range []uint32{0, 65536, 65536, 0, 0, uint32(len(endpoint))} {
		hello = binary.LittleEndian.AppendUint32(hello, v)
	}
	if _, err := c.Write(uacpFrame("HELF", append(hello, endpoint...))); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65536)
	if n, err := c.Read(buf); err != nil || string(buf[:4]) != "ACKF" {
		t.Fatalf("hello answered %q, %v", buf[:n], err)
	}
	open := encodeRequest(t, &ua.OpenSecureChannelRequest{
		RequestHeader: &ua.RequestHeader{AuthenticationToken: ua.NewTwoByteNodeID(0), Timestamp: time.Now(), AdditionalHeader: ua.NewExtensionObject(nil)},
		RequestType:   ua.SecurityTokenRequestTypeIssue, SecurityMode: ua.MessageSecurityModeNone, RequestedLifetime: 600000})
	opn := binary.LittleEndian.AppendUint32(nil, 0) // secure channel id
	opn = binary.LittleEndian.AppendUint32(opn, uint32(len(ua.SecurityPolicyURINone)))
	opn = append(opn, ua.SecurityPolicyURINone...)
	opn = binary.LittleEndian.AppendUint32(opn, 0xFFFFFFFF) // no certificate
	opn = binary.LittleEndian.AppendUint32(opn, 0xFFFFFFFF) // no thumbprint
	opn = binary.LittleEndian.AppendUint32(opn, 1)          // sequence number
	opn = binary.LittleEndian.AppendUint32(opn, 1)          // request id
	if _, err := c.Write(uacpFrame("OPNF", append(opn, open...))); err != nil {
		t.Fatal(err)
	}
	n, err := c.Read(buf)
	if err != nil || string(buf[:4]) != "OPNF" {
		t.Fatalf("OpenSecureChannel answered %q, %v", buf[:n], err)
	}
	channel := binary.LittleEndian.Uint32(buf[8:])
	at := 12
	for range 3 { // policy, certificate, thumbprint
		l := int(int32(binary.LittleEndian.Uint32(buf[at:])))
		at += 4 + max(l, 0)
	}
	_, v, err := ua.DecodeService(buf[at+8 : n])
	if err != nil {
		t.Fatal(err)
	}
	res, ok := v.(*ua.OpenSecureChannelResponse)
	if !ok {
		t.Fatalf("OpenSecureChannel answered %T", v)
	}
	msg := binary.LittleEndian.AppendUint32(nil, channel)
	msg = binary.LittleEndian.AppendUint32(msg, res.SecurityToken.TokenID)
	msg = binary.LittleEndian.AppendUint32(msg, 2) // sequence number
	msg = binary.LittleEndian.AppendUint32(msg, 2) // request id
	if _, err := c.Write(uacpFrame("MSGF", append(msg, body...))); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, _ = c.Read(buf) // an Error message, a fault, or nothing: the server's own business
}
