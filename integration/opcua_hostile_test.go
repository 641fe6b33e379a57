package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"net/url"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// TestOPCUAMalformedRequestsDoNotKillTheServer sends, over a plain
// (security None) channel and before any session, requests whose length
// fields make gopcua's decoder allocate gigabytes or panic on a goroutine
// nothing recovers: the first ended the whole scadad process with v0.9.0,
// the second with v0.9.1, and the third (a Variant declaring 2^31-1 array
// dimensions, 8 GiB) stalls the process long enough to lose the Active
// role, and the fourth (a million nested Variants) overflows the decoding
// goroutine's stack, which ends the process (WORKAROUNDS.md row 18). On a
// site with a None profile the front walks and decodes what travels in
// clear first; on a secure-only site a None channel carries discovery
// alone. The Active must go on serving, as Active.
func TestOPCUAMalformedRequestsDoNotKillTheServer(t *testing.T) {
	sim, c, active, standby := opcuaPair(t)
	lab := testcluster.SiteConfigGateway("hostile", sim.Addr, map[string]string{"sink": "http://127.0.0.1:9/x"}, 5)
	deploySite(t, c, lab)
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
	// The same Write with array dimensions: 2^31-1 of them.
	dims := encodeRequest(t, write)
	dims[at] = 0xCB
	dims = append(dims[:at+13], append([]byte{0xFF, 0xFF, 0xFF, 0x7F}, dims[at+13:]...)...)
	// The same Write with its value a Double inside a million nested
	// Variants (one byte each): the decoder recursed until the goroutine's
	// stack passed 1 GB, a fatal error nothing recovers.
	plain := encodeRequest(t, &ua.WriteRequest{RequestHeader: header, NodesToWrite: []*ua.WriteValue{{NodeID: ua.NewStringNodeID(1, "Pump1.SpeedSP"),
		AttributeID: ua.AttributeIDValue, Value: &ua.DataValue{EncodingMask: ua.DataValueValue, Value: ua.MustVariant(1.0)}}}})
	deep := append([]byte(nil), plain[:len(plain)-9]...) // the Double Variant is last
	deep = append(deep, bytes.Repeat([]byte{byte(ua.TypeIDVariant)}, 1<<20-64-len(plain))...)
	deep = append(deep, plain[len(plain)-9:]...)

	stillActive := func(what string) {
		t.Helper()
		testwait.For(t, 10*time.Second, active.ID+" still Active after "+what, func() bool {
			h, ok := active.Health()
			return ok && h.Role == "active"
		})

		if !active.Running() {
			t.Fatalf("%s ended the Active's process", what)
		}
	}
	for _, tc := range []struct {
		name string
		body []byte
	}{{"an array of 2^31-1 strings", hugeArray}, {"a variant array of length -2", negative},
		{"a variant of 2^31-1 dimensions", dims}, {"a million nested variants", deep}} {
		sendPlainRequest(t, active.OPCUA, tc.body)
		stillActive(tc.name + " (a site with a None profile)")
		testwait.For(t, 10*time.Second, "ServiceLevel 250 on the Active after "+tc.name, func() bool { return serviceLevel(active.OPCUA) == 250 })
	}
	// The last three refused by the front before the library's decoder
	// (the first the library refuses itself, allocating nothing).
	testwait.For(t, 5*time.Second, "the front's refusal of the three hostile Writes on the None channel", func() bool {
		return metricLine(active, `scadad_opcua_connections_refused_total{reason="malformed"}`) == "3"
	})

	secure := bytes.Replace(lab, []byte("  security: [{policy: None, mode: None}]\n"), []byte("  security: [{policy: Basic256Sha256, mode: SignAndEncrypt}]\n"), 1)
	if bytes.Equal(secure, lab) {
		t.Fatal("site config template changed: no security line to replace")
	}
	deploySite(t, c, secure)
	testwait.For(t, 20*time.Second, "the Active's OPC UA server back with its secure endpoint", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		eps, err := gopcua.GetEndpoints(ctx, active.OPCUA)
		return err == nil && len(eps) == 1 && eps[0].SecurityMode == ua.MessageSecurityModeSignAndEncrypt
	})

	for _, tc := range []struct {
		name string
		body []byte
	}{{"an array of 2^31-1 strings", hugeArray}, {"a variant array of length -2", negative}, {"a variant of 2^31-1 dimensions", dims}} {
		sendPlainRequest(t, active.OPCUA, tc.body)
		stillActive(tc.name + " (a secure-only site)")
	}
	// Counted once the front has closed both sides of each.
	testwait.For(t, 5*time.Second, "the front's refusal of the two Writes on the secure-only site's None channel", func() bool {
		return metricLine(active, `scadad_opcua_connections_refused_total{reason="security_mode"}`) == "2"
	})

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
