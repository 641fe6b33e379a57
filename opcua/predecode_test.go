package opcua

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"
)

// hostileWrite is the body of a Write of one Double array value (type id,
// then the request) and where its Variant starts.
func hostileWrite(t testing.TB) ([]byte, int) {
	t.Helper()
	header := &ua.RequestHeader{AuthenticationToken: ua.NewTwoByteNodeID(0), Timestamp: time.Unix(1e9, 0), AdditionalHeader: ua.NewExtensionObject(nil)}
	write := &ua.WriteRequest{RequestHeader: header, NodesToWrite: []*ua.WriteValue{{NodeID: ua.NewStringNodeID(2, "Pump1.SpeedSP"),
		AttributeID: ua.AttributeIDValue, Value: &ua.DataValue{EncodingMask: ua.DataValueValue, Value: ua.MustVariant([]float64{1})}}}}
	body := encodeBody(t, write)
	at := bytes.Index(body, []byte{0x8B, 1, 0, 0, 0}) // Double array, one element
	if at < 0 {
		t.Fatal("no Double array in the encoded Write")
	}
	return body, at
}

func encodeBody(t testing.TB, req any) []byte {
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

// withVariant is body with the Variant at at (9+4 bytes: mask, length, one
// Double) replaced by v.
func withVariant(body []byte, at int, v []byte) []byte {
	out := append([]byte(nil), body[:at]...)
	out = append(out, v...)
	return append(out, body[at+13:]...)
}

func le32(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

// TestHostileVariantsRefusedBeforeDecoding sends the front requests whose
// Variants would make gopcua's decoder allocate gigabytes, build millions
// of slices, or recurse a million levels deep (upstream PRs #892, #893):
// each is refused with BadEncodingLimitsExceeded, and checking it
// allocates little (the decoder itself made an 8 GiB dimension array for
// the first).
func TestHostileVariantsRefusedBeforeDecoding(t *testing.T) {
	body, at := hostileWrite(t)
	double := append([]byte{0x0B}, make([]byte, 8)...)
	deep := bytes.Repeat([]byte{byte(ua.TypeIDVariant)}, 1<<20-len(body))
	deep = append(deep, double...)
	for _, tc := range []struct {
		name    string
		variant []byte
	}{
		// 2^31-1 dimensions declared, none sent: 8 GiB of int32s.
		{"2^31-1 array dimensions", append(append([]byte{0xCB}, le32(1)...), append(double[1:], le32(0x7FFFFFFF)...)...)},
		// 2^11 x 2^11 x 2^10 = 2^32 wraps the decoder's int32 product to
		// 0, the array's length: its reshaping builds 4 million slices.
		{"dimensions whose product wraps", append([]byte{0xCB}, le32(0, 3, 2048, 2048, 1024)...)},
		{"a negative array length", append([]byte{0x8B}, le32(0xFFFFFFFE)...)},
		{"an array longer than the message", append([]byte{0x81}, le32(60000)...)},
		{"a million nested Variants", deep},
		{"33 array dimensions", append(append([]byte{0xC1}, le32(1)...), append(append([]byte{1}, le32(33)...), bytes.Repeat(le32(1), 33)...)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := withVariant(body, at, tc.variant)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			refused := (&channelState{policy: ua.SecurityPolicyURIBasic256Sha256}).request('F', req)
			runtime.ReadMemStats(&after)
			if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
				t.Fatalf("checking a %d-byte request allocated %d MiB", len(req), got>>20)
			}
			if refused == nil || refused.status() != ua.StatusBadEncodingLimitsExceeded || refused.reason() != refusedMalformed {
				t.Fatalf("refused %v, want BadEncodingLimitsExceeded (%s)", refused, refusedMalformed)
			}
		})
	}
}

// TestOrdinaryRequestsPassThePreDecode: what clients send every day passes
// the bounds: a 2x3 array write, a session activation with a user name
// token, monitored items with a deadband filter, a request header with an
// extension object the library does not know, nested Variants a few
// levels deep.
func TestOrdinaryRequestsPassThePreDecode(t *testing.T) {
	header := &ua.RequestHeader{AuthenticationToken: ua.NewTwoByteNodeID(0), Timestamp: time.Unix(1e9, 0), AdditionalHeader: ua.NewExtensionObject(nil)}
	matrix := ua.MustVariant([][]float64{{1, 2, 3}, {4, 5, 6}})
	nested := ua.MustVariant([]*ua.Variant{ua.MustVariant(ua.MustVariant(int32(7))), ua.MustVariant("x")})
	unknown := &ua.RequestHeader{AuthenticationToken: ua.NewTwoByteNodeID(0), AdditionalHeader: &ua.ExtensionObject{
		EncodingMask: ua.ExtensionObjectBinary, TypeID: ua.NewFourByteExpandedNodeID(3, 4711), Value: &ua.ReadValueID{NodeID: ua.NewNumericNodeID(0, 1), DataEncoding: &ua.QualifiedName{}}}}
	for _, tc := range []struct {
		name string
		req  any
	}{
		{"a 2x3 array write", &ua.WriteRequest{RequestHeader: header, NodesToWrite: []*ua.WriteValue{{NodeID: ua.NewStringNodeID(2, "a"),
			AttributeID: ua.AttributeIDValue, Value: &ua.DataValue{EncodingMask: ua.DataValueValue | ua.DataValueSourceTimestamp, Value: matrix, SourceTimestamp: time.Unix(1e9, 0)}}}}},
		{"nested Variants", &ua.WriteRequest{RequestHeader: header, NodesToWrite: []*ua.WriteValue{{NodeID: ua.NewStringNodeID(2, "a"),
			AttributeID: ua.AttributeIDValue, Value: &ua.DataValue{EncodingMask: ua.DataValueValue, Value: nested}}}}},
		{"a user name activation", &ua.ActivateSessionRequest{RequestHeader: header, ClientSignature: &ua.SignatureData{},
			UserIdentityToken:  ua.NewExtensionObject(&ua.UserNameIdentityToken{PolicyID: "username", UserName: "op", Password: []byte("secret")}),
			UserTokenSignature: &ua.SignatureData{}}},
		{"monitored items with a deadband", &ua.CreateMonitoredItemsRequest{RequestHeader: header, SubscriptionID: 1, TimestampsToReturn: ua.TimestampsToReturnBoth,
			ItemsToCreate: []*ua.MonitoredItemCreateRequest{{ItemToMonitor: &ua.ReadValueID{NodeID: ua.NewStringNodeID(2, "a"), AttributeID: ua.AttributeIDValue, DataEncoding: &ua.QualifiedName{}},
				MonitoringMode: ua.MonitoringModeReporting, RequestedParameters: &ua.MonitoringParameters{ClientHandle: 1, SamplingInterval: 100, QueueSize: 1,
					Filter: ua.NewExtensionObject(&ua.DataChangeFilter{Trigger: ua.DataChangeTriggerStatusValue, DeadbandType: uint32(ua.DeadbandTypeAbsolute), DeadbandValue: 0.5})}}}}},
		{"an unknown extension object in the header", &ua.ReadRequest{RequestHeader: unknown, NodesToRead: []*ua.ReadValueID{{NodeID: ua.NewNumericNodeID(0, 2258), AttributeID: ua.AttributeIDValue, DataEncoding: &ua.QualifiedName{}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := encodeBody(t, tc.req)
			if err := checkEncodingLimits(body); err != nil {
				t.Fatalf("refused: %v", err)
			}
			if _, _, err := ua.DecodeService(body); err != nil {
				t.Fatalf("the library does not decode it either: %v", err)
			}
		})
	}
}

// TestPreDecodeStopsWhereTheLibraryRefuses: a request cut short, or with a
// slice longer than the message, is the library's to answer (it allocates
// nothing for it): the pre-decode does not refuse it.
func TestPreDecodeStopsWhereTheLibraryRefuses(t *testing.T) {
	body, at := hostileWrite(t)
	for _, cut := range []int{5, at + 3, len(body) - 1} {
		if err := checkEncodingLimits(body[:cut]); err != nil {
			t.Fatalf("cut at %d of %d: %v", cut, len(body), err)
		}
	}
	var limits *encodingLimitsError
	if err := checkEncodingLimits(withVariant(body, at, append([]byte{0x8B}, le32(0xFFFFFFFE)...))); !errors.As(err, &limits) {
		t.Fatalf("a negative array length: %v, want an encodingLimitsError", err)
	}
}
