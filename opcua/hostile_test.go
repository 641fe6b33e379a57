package opcua

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/internal/testwait"
)

// stillServing fails the test unless a fresh client can connect and read.
func stillServing(t *testing.T, ts *testServer) {
	t.Helper()
	c := connect(t, ts.Endpoint())
	if got := levelOf(t, readValue(t, c, serviceLevelID, ua.AttributeIDValue)); got != ts.ServiceLevel() {
		t.Fatalf("fresh client read ServiceLevel %d, server says %d", got, ts.ServiceLevel())
	}
}

// Requests on a secure channel without an activated session are refused.
// The library would serve them, and a CreateSubscription without a session
// makes its subscription goroutine dereference a nil session and kill the
// process.
func TestRequestsWithoutSessionRefused(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	// A real secure channel, but authentication tokens of no activated
	// session: one never issued, and the null token.
	tokens := []*ua.NodeID{ua.NewTwoByteNodeID(0), ua.NewNumericNodeID(0, 123456789)}
	requests := []struct {
		name string
		req  func() ua.Request
	}{
		{"read", func() ua.Request {
			// DataEncoding must be set: the encoder skips nil struct
			// pointers, which leaves a truncated message the server drops.
			return &ua.ReadRequest{NodesToRead: []*ua.ReadValueID{{NodeID: serviceLevelID, AttributeID: ua.AttributeIDValue, DataEncoding: &ua.QualifiedName{}}}}
		}},
		{"write", func() ua.Request {
			return &ua.WriteRequest{NodesToWrite: []*ua.WriteValue{{NodeID: ts.NodeID("Pump1", "Speed"), AttributeID: ua.AttributeIDValue, Value: dv(ua.MustVariant(1.0))}}}
		}},
		{"browse", func() ua.Request {
			return &ua.BrowseRequest{View: &ua.ViewDescription{ViewID: ua.NewTwoByteNodeID(0)}, NodesToBrowse: []*ua.BrowseDescription{{NodeID: ua.NewNumericNodeID(0, 85), ReferenceTypeID: ua.NewTwoByteNodeID(0)}}}
		}},
		{"create subscription", func() ua.Request {
			return &ua.CreateSubscriptionRequest{RequestedPublishingInterval: 100, RequestedLifetimeCount: 30, RequestedMaxKeepAliveCount: 10}
		}},
		{"delete subscriptions", func() ua.Request { return &ua.DeleteSubscriptionsRequest{SubscriptionIDs: []uint32{1}} }},
		{"create monitored items", func() ua.Request { return &ua.CreateMonitoredItemsRequest{SubscriptionID: 1} }},
		{"set monitoring mode", func() ua.Request {
			return &ua.SetMonitoringModeRequest{SubscriptionID: 1, MonitoredItemIDs: []uint32{1}}
		}},
		{"delete monitored items", func() ua.Request {
			return &ua.DeleteMonitoredItemsRequest{SubscriptionID: 1, MonitoredItemIDs: []uint32{1}}
		}},
	}
	// The gopcua client tears its connection down when it sees
	// BadSessionIDInvalid, so the refusal is observed on the server side and
	// each request gets its own client.
	rejected := func() float64 { return metricValue(t, ts.metrics.rejected.WithLabelValues("no-session")) }
	for i, r := range requests {
		tok := tokens[i%len(tokens)]
		t.Run(r.name+"/"+tok.String(), func(t *testing.T) {
			c := connect(t, ts.Endpoint())
			before := rejected()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			err := c.SecureChannel().SendRequestWithTimeout(ctx, r.req(), tok, 500*time.Millisecond, func(ua.Response) error { return nil })
			if err == nil {
				t.Fatalf("%s with token %s succeeded", r.name, tok)
			}
			testwait.For(t, 3*time.Second, "the server to count the refusal", func() bool { return rejected() == before+1 })
		})
	}
	if len(ts.writer.Calls()) != 0 {
		t.Fatal("a session-less write reached the writer")
	}
	stillServing(t, ts)
}

// sendRaw sends req on the client's session and returns the response.
func sendRaw[T ua.Response](t *testing.T, c *gopcua.Client, req ua.Request) (T, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var out T
	err := c.Send(ctx, req, func(r ua.Response) error {
		v, ok := r.(T)
		if !ok {
			return errors.New("unexpected response type")
		}
		out = v
		return nil
	})
	return out, err
}

// Subscription requests the library would panic on (unknown monitored
// items dereferenced as nil, a zero publishing interval fed to a ticker)
// get Bad statuses and the server keeps serving.
func TestHostileSubscriptionRequests(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	c := connect(t, ts.Endpoint())

	created, err := sendRaw[*ua.CreateSubscriptionResponse](t, c, &ua.CreateSubscriptionRequest{
		RequestedPublishingInterval: 0, RequestedLifetimeCount: 0, RequestedMaxKeepAliveCount: 0,
	})
	if err != nil {
		t.Fatalf("zero-interval subscription: %v", err)
	}
	if created.RevisedPublishingInterval < 50 || created.RevisedMaxKeepAliveCount == 0 || created.RevisedLifetimeCount < 3*created.RevisedMaxKeepAliveCount {
		t.Fatalf("revised parameters not clamped: %+v", created)
	}
	subID := created.SubscriptionID

	items, err := sendRaw[*ua.CreateMonitoredItemsResponse](t, c, &ua.CreateMonitoredItemsRequest{
		SubscriptionID: subID, TimestampsToReturn: ua.TimestampsToReturnBoth,
		ItemsToCreate: []*ua.MonitoredItemCreateRequest{
			gopcua.NewMonitoredItemCreateRequestWithDefaults(ua.NewStringNodeID(ts.ns.idx, "Nope.X"), ua.AttributeIDValue, 1),
			gopcua.NewMonitoredItemCreateRequestWithDefaults(ua.NewStringNodeID(42, "x"), ua.AttributeIDValue, 2),
			gopcua.NewMonitoredItemCreateRequestWithDefaults(ts.NodeID("Pump1", "Speed"), ua.AttributeIDValue, 3),
		},
	})
	if err != nil {
		t.Fatalf("create monitored items: %v", err)
	}
	got := []ua.StatusCode{items.Results[0].StatusCode, items.Results[1].StatusCode, items.Results[2].StatusCode}
	want := []ua.StatusCode{ua.StatusBadNodeIDUnknown, ua.StatusBadNodeIDUnknown, ua.StatusOK}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("monitored item results %v, want %v", got, want)
		}
	}
	goodItem := items.Results[2].MonitoredItemID

	if _, err := sendRaw[*ua.CreateMonitoredItemsResponse](t, c, &ua.CreateMonitoredItemsRequest{
		SubscriptionID: subID + 1000,
		ItemsToCreate:  []*ua.MonitoredItemCreateRequest{gopcua.NewMonitoredItemCreateRequestWithDefaults(serviceLevelID, ua.AttributeIDValue, 1)},
	}); !errors.Is(err, ua.StatusBadSubscriptionIDInvalid) {
		t.Fatalf("items on unknown subscription: %v", err)
	}
	mode, err := sendRaw[*ua.SetMonitoringModeResponse](t, c, &ua.SetMonitoringModeRequest{SubscriptionID: subID, MonitoringMode: ua.MonitoringModeReporting, MonitoredItemIDs: []uint32{99999, goodItem}})
	if err != nil || mode.Results[0] != ua.StatusBadMonitoredItemIDInvalid || mode.Results[1] != ua.StatusOK {
		t.Fatalf("set monitoring mode: %v %+v", err, mode)
	}
	del, err := sendRaw[*ua.DeleteMonitoredItemsResponse](t, c, &ua.DeleteMonitoredItemsRequest{SubscriptionID: subID, MonitoredItemIDs: []uint32{99999, goodItem}})
	if err != nil || del.Results[0] != ua.StatusBadMonitoredItemIDInvalid || del.Results[1] != ua.StatusOK {
		t.Fatalf("delete monitored items: %v %+v", err, del)
	}
	subs, err := sendRaw[*ua.DeleteSubscriptionsResponse](t, c, &ua.DeleteSubscriptionsRequest{SubscriptionIDs: []uint32{99999}})
	if err != nil || subs.Results[0] != ua.StatusBadSubscriptionIDInvalid {
		t.Fatalf("delete unknown subscription: %v %+v", err, subs)
	}
	stillServing(t, ts)
}

// Malformed and oversized traffic costs the sender its connection, never
// the server its process.
func TestMalformedAndOversizedTraffic(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	addr := strings.TrimPrefix(ts.Endpoint(), "opc.tcp://")

	hello := func(msgSize uint32) []byte {
		url := []byte(ts.Endpoint())
		b := make([]byte, 32+len(url))
		copy(b, "HELF")
		binary.LittleEndian.PutUint32(b[4:], uint32(len(b)))
		binary.LittleEndian.PutUint32(b[12:], 0xffff) // receive buffer
		binary.LittleEndian.PutUint32(b[16:], 0xffff) // send buffer
		binary.LittleEndian.PutUint32(b[20:], msgSize)
		binary.LittleEndian.PutUint32(b[28:], uint32(len(url)))
		copy(b[32:], url)
		return b
	}
	payloads := []struct {
		name  string
		bytes [][]byte
	}{
		{"garbage", [][]byte{[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")}},
		{"header claiming 4 GiB", [][]byte{{'M', 'S', 'G', 'F', 0xff, 0xff, 0xff, 0xff, 1, 2, 3}}},
		{"hello then garbage chunk", [][]byte{hello(0), []byte("MSGF\x20\x00\x00\x00\xde\xad\xbe\xef\xde\xad\xbe\xef\xde\xad\xbe\xef\xde\xad\xbe\xef\xde\xad\xbe\xef\xde\xad\xbe\xef")}},
		{"hello then open with bogus policy", [][]byte{hello(0), append([]byte("OPNF\x40\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00bogus"), make([]byte, 43)...)}},
		{"truncated hello", [][]byte{hello(0)[:20]}},
	}
	for _, p := range payloads {
		t.Run(p.name, func(t *testing.T) {
			conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range p.bytes {
				conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
				if _, err := conn.Write(b); err != nil {
					break // the server may already have hung up: fine
				}
			}
			conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			buf := make([]byte, 512)
			conn.Read(buf)
			conn.Close()
			stillServing(t, ts)
		})
	}

	// These clients lose their channel; a short request timeout keeps their
	// CloseSession on cleanup from waiting long.
	short := gopcua.RequestTimeout(500 * time.Millisecond)
	t.Run("oversized write request", func(t *testing.T) {
		c := connect(t, ts.Endpoint(), short)
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		huge := strings.Repeat("x", 3<<20) // over the 2 MiB message limit
		_, err := c.Write(ctx, &ua.WriteRequest{NodesToWrite: []*ua.WriteValue{{
			NodeID: ts.NodeID("Tank1", "Label"), AttributeID: ua.AttributeIDValue, Value: dv(ua.MustVariant(huge)),
		}}})
		t.Logf("3 MiB write: %v", err)
		stillServing(t, ts)
	})
	t.Run("request the server cannot decode", func(t *testing.T) {
		c := connect(t, ts.Endpoint(), short)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		// A nil DataEncoding is skipped by the encoder: the body is truncated.
		truncated := &ua.ReadRequest{NodesToRead: []*ua.ReadValueID{{NodeID: serviceLevelID, AttributeID: ua.AttributeIDValue}}}
		if err := c.SecureChannel().SendRequestWithTimeout(ctx, truncated, nil, 500*time.Millisecond, func(ua.Response) error { return nil }); err == nil {
			t.Fatal("a truncated request was answered as if valid")
		}
		stillServing(t, ts)
	})
	t.Run("long string under the message limit", func(t *testing.T) {
		c := connect(t, ts.Endpoint())
		got := writeValue(t, c, ts.NodeID("Tank1", "Label"), ua.AttributeIDValue, ua.MustVariant(strings.Repeat("x", 1<<20)))
		if got != ua.StatusBadOutOfRange {
			t.Fatalf("1 MiB string write: %v, want BadOutOfRange", got)
		}
	})
	if len(ts.writer.Calls()) != 0 {
		t.Fatal("an oversized write reached the writer")
	}
}
