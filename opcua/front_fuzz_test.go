package opcua

import (
	"bytes"
	"encoding/binary"
	"net"
	"runtime"
	"testing"
	"time"
)

// FuzzFrontPreDecode feeds a client's bytes to what the front reads before
// the library sees them: the Hello, an OpenSecureChannel's security header,
// and a request body in clear through the discovery-only and the decode
// checks, whole and cut into chunks. Nothing may panic (the library's
// decoder panics are caught and become a refusal), nothing may hold more
// than maxClassifiedLen, and the same bytes get the same verdict.
// Run: go test ./opcua -run '^$' -fuzz FuzzFrontPreDecode -fuzztime 30s
func FuzzFrontPreDecode(f *testing.F) {
	hello := make([]byte, 0, 64)
	hello = append(hello, "HELF"...)
	hello = binary.LittleEndian.AppendUint32(hello, uint32(8+5*4+4+len("opc.tcp://x")))
	hello = binary.LittleEndian.AppendUint32(hello, 0)
	for range 4 {
		hello = binary.LittleEndian.AppendUint32(hello, 65536)
	}
	hello = binary.LittleEndian.AppendUint32(hello, uint32(len("opc.tcp://x")))
	hello = append(hello, "opc.tcp://x"...)
	f.Add(hello, uint8(2))
	// GetEndpoints with a plain request header (four-byte type id 428).
	getEndpoints := []byte{0x01, 0x00, 0xac, 0x01, 0x00, 0x00}
	getEndpoints = append(getEndpoints, make([]byte, 8+4+4)...)
	getEndpoints = append(getEndpoints, 0xff, 0xff, 0xff, 0xff)
	getEndpoints = append(getEndpoints, 0, 0, 0, 0, 0x00, 0x00, 0x00)
	f.Add(getEndpoints, uint8(1))
	f.Add([]byte("OPNF\x20\x00\x00\x00\x00\x00\x00\x00\x2f\x00\x00\x00http://opcfoundation.org/UA/SecurityPolicy#None\xff\xff\xff\xff"), uint8(3))
	f.Add([]byte{}, uint8(0))

	f.Fuzz(func(t *testing.T, data []byte, cuts uint8) {
		// The Hello, read from a connection as the front reads it.
		client, front := net.Pipe()
		go func() {
			_, _ = client.Write(data)
			_ = client.Close()
		}()
		msg, _, err := readHello(front, time.Second)
		_ = front.Close()
		if err == nil && !bytes.HasPrefix(data, msg) {
			t.Fatalf("hello %q is not what the client sent", msg)
		}
		_, _ = openSecurity(data)

		verdict := func(discoveryOnly bool) string {
			c := channelState{policy: "p", discoveryOnly: discoveryOnly}
			n := int(cuts%8) + 1
			step := max(len(data)/n, 1)
			var why string
			for at := 0; at < len(data) || at == 0; at += step {
				end := min(at+step, len(data))
				chunk := byte('C')
				if end == len(data) {
					chunk = 'F'
				}
				if refused := c.request(chunk, data[at:end]); refused != nil {
					why = refused.Error()
					break
				}
				if len(c.pending) > maxClassifiedLen {
					t.Fatalf("holds %d bytes of chunks, more than %d", len(c.pending), maxClassifiedLen)
				}
				if end == len(data) {
					break
				}
			}
			return why
		}
		for _, discovery := range []bool{false, true} {
			if a, b := verdict(discovery), verdict(discovery); a != b {
				t.Fatalf("the same request got %q, then %q", a, b)
			}
		}
		_ = discoveryRequest(data)
		_ = plainRequestHeader(data)
	})
}

// FuzzEncodingLimits puts random bytes where a Write carries its value's
// Variant: what the pre-decode lets through, the library's decoder takes
// in memory bounded by the request's size, and never overflows its stack.
// Run: go test ./opcua -run '^$' -fuzz FuzzEncodingLimits -fuzztime 30s
func FuzzEncodingLimits(f *testing.F) {
	f.Add([]byte{0x0B, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(append([]byte{0xCB}, le32(1, 0, 0, 1, 0x7FFFFFFF)...))
	f.Add(append([]byte{0xCB}, le32(0, 3, 2048, 2048, 1024)...))
	f.Add(append(bytes.Repeat([]byte{24}, 200), 0x0B, 0, 0, 0, 0, 0, 0, 0, 0))
	f.Add(append([]byte{0x97}, le32(2)...)) // an array of DataValues
	f.Fuzz(func(t *testing.T, variant []byte) {
		body, at := hostileWrite(t)
		req := append(append(append([]byte(nil), body[:at]...), variant...), body[at+13:]...)
		if checkEncodingLimits(req) != nil {
			return
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_ = decodePanic(req)
		runtime.ReadMemStats(&after)
		if got, bound := after.TotalAlloc-before.TotalAlloc, uint64(4<<20+1024*len(req)); got > bound {
			t.Fatalf("the decoder allocated %d bytes for a %d-byte request the pre-decode let through", got, len(req))
		}
	})
}
