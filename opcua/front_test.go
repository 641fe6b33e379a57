package opcua

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/internal/promtest"
	"github.com/scadad/scadad/internal/testwait"
)

// resetBeforeHello connects to addr and resets the connection without a
// word: what a port scan or a load balancer's TCP check (linger 0) does.
func resetBeforeHello(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	if err := c.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// helloThenReset sends a whole Hello and resets the connection at once.
func helloThenReset(t *testing.T, addr, endpoint string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	b := make([]byte, 32+len(endpoint))
	copy(b, "HELF")
	binary.LittleEndian.PutUint32(b[4:], uint32(len(b)))
	binary.LittleEndian.PutUint32(b[12:], 0xffff) // receive buffer
	binary.LittleEndian.PutUint32(b[16:], 0xffff) // send buffer
	binary.LittleEndian.PutUint32(b[28:], uint32(len(endpoint)))
	copy(b[32:], endpoint)
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).SetLinger(0)
	c.Close()
}

// The library stops accepting for good after one connection resets before
// its Hello; this test flips when it no longer does (then front.go may go).
func TestLibraryDefectAcceptLoopDiesOnReset(t *testing.T) {
	_, url := startBareServer(t)
	resetBeforeHello(t, strings.TrimPrefix(url, "opc.tcp://"))
	time.Sleep(100 * time.Millisecond) // let the accept loop read the reset (nothing to poll on)
	c, err := gopcua.NewClient(url, gopcua.SecurityMode(ua.MessageSecurityModeNone), gopcua.AutoReconnect(false),
		gopcua.DialTimeout(time.Second), gopcua.RequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Connect(ctx); err == nil {
		c.Close(context.Background())
		t.Fatal("library now accepts clients after a reset before Hello: review WORKAROUNDS.md and front.go")
	}
}

// Resets before Hello, a connection that says nothing and one that says
// something else cost those connections only: a fresh client still
// connects at once, and each is counted.
func TestFrontKeepsServingThroughScansAndSilence(t *testing.T) {
	ts := startServer(t, activeState(), func(c *Config) { c.HelloTimeout = 300 * time.Millisecond })
	addr := strings.TrimPrefix(ts.Endpoint(), "opc.tcp://")
	for range 3 {
		resetBeforeHello(t, addr)
	}
	// Whole Hellos whose senders reset at once: these reach the library,
	// and its handshake must not fail on them.
	for range 20 {
		helloThenReset(t, addr, ts.Endpoint())
	}
	silent, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	start := time.Now()
	stillServing(t, ts)
	t.Logf("a fresh client connected and read in %v beside a silent connection", time.Since(start).Round(time.Millisecond))

	// The silent connection is closed once its Hello is overdue.
	silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("silent connection: read %v, want EOF once the Hello is overdue", err)
	}
	other, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	other.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	other.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := other.Read(make([]byte, 1)); err == nil {
		t.Fatal("an HTTP request got an answer from the OPC UA port")
	}
	other.Close()
	stillServing(t, ts)

	testwait.For(t, 5*time.Second, "the refusals counted", func() bool {
		noHello, _, _ := promtest.Value(ts.reg, "scadad_opcua_connections_refused_total", refusedNoHello)
		notHello, _, _ := promtest.Value(ts.reg, "scadad_opcua_connections_refused_total", refusedNotHello)
		return noHello == 4 && notHello == 1
	})
}

// Clients get the advertised endpoint whatever host name they used to
// reach the server (the library answered only its own exact URL), and
// never the library's loopback address.
func TestGetEndpointsAnswersAnyHostName(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(ts.Endpoint(), "opc.tcp://"))
	for _, url := range []string{ts.Endpoint(), "opc.tcp://localhost:" + port, "OPC.TCP://127.0.0.1:" + port + "/"} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		eps, err := gopcua.GetEndpoints(ctx, url)
		cancel()
		if err != nil {
			t.Fatalf("GetEndpoints %s: %v", url, err)
		}
		if len(eps) == 0 {
			t.Fatalf("GetEndpoints %s: no endpoints", url)
		}
		for _, ep := range eps {
			if ep.EndpointURL != ts.Endpoint() || len(ep.Server.DiscoveryURLs) != 1 || ep.Server.DiscoveryURLs[0] != ts.Endpoint() {
				t.Fatalf("GetEndpoints %s: endpoint %s, discovery %v; want %s", url, ep.EndpointURL, ep.Server.DiscoveryURLs, ts.Endpoint())
			}
		}
	}
	c := connect(t, "opc.tcp://localhost:"+port)
	if got := levelOf(t, readValue(t, c, serviceLevelID, ua.AttributeIDValue)); got != ts.ServiceLevel() {
		t.Fatalf("client by host name localhost read ServiceLevel %d, want %d", got, ts.ServiceLevel())
	}
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (dialed, accepted net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	accepted, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dialed.Close(); accepted.Close() })
	return dialed, accepted
}

// A client that stops reading is cut off once a write to it stalls, so the
// library's one goroutine is not held up for good; a client that reads
// gets every byte.
func TestSpliceCutsOffAClientThatStopsReading(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reads   bool
		wantErr error
	}{
		{"reading client", true, nil},
		{"client that stopped reading", false, os.ErrDeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, frontClient := tcpPair(t)
			frontLibrary, library := tcpPair(t)
			const total = 16 << 20 // far beyond what socket buffers hold
			go func() {
				// 64 KiB Error messages: the front passes them on as
				// they are.
				chunk := errorMessage(ua.StatusBadInternalError, string(make([]byte, 64<<10-16)))
				for sent := 0; sent < total; sent += len(chunk) {
					if _, err := library.Write(chunk); err != nil {
						return
					}
				}
				library.Close()
			}()
			received := make(chan int64, 1)
			if tc.reads {
				go func() {
					n, _ := io.Copy(io.Discard, client)
					received <- n
				}()
			}
			done := make(chan error, 1)
			go func() {
				done <- splice(frontClient, frontLibrary, 200*time.Millisecond, channelRules{}, newChannelRelay(nil, nil))
			}()
			select {
			case err := <-done:
				if !errors.Is(err, tc.wantErr) && err != tc.wantErr {
					t.Fatalf("splice ended with %v, want %v", err, tc.wantErr)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("splice still copying after 20 s")
			}
			if tc.reads {
				if n := <-received; n != total {
					t.Fatalf("client received %d bytes, want %d", n, total)
				}
			}
		})
	}
}

// A local process can still reach the library's loopback port, and one
// reset there ends the library's accept loop (the test above). The first
// client after it finds its Hello unanswered; the server then replaces the
// library and clients are served again, with the same address space, and
// the clients of the old one are disconnected so they reconnect.
func TestServerReplacesALibraryThatStopsTakingConnections(t *testing.T) {
	ts := startServer(t, activeState(), func(c *Config) { c.HelloTimeout = 500 * time.Millisecond })
	before := connect(t, ts.Endpoint())
	old := ts.lib.Load().backend
	resetBeforeHello(t, old)

	tryRead := func() error {
		c, err := gopcua.NewClient(ts.Endpoint(), gopcua.SecurityMode(ua.MessageSecurityModeNone), gopcua.AutoReconnect(false),
			gopcua.DialTimeout(2*time.Second), gopcua.RequestTimeout(2*time.Second))
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := c.Connect(ctx); err != nil {
			return err
		}
		defer c.Close(context.Background())
		resp, err := c.Read(ctx, &ua.ReadRequest{NodesToRead: []*ua.ReadValueID{
			{NodeID: serviceLevelID, AttributeID: ua.AttributeIDValue},
			{NodeID: ts.NodeID("Pump1", "Speed"), AttributeID: ua.AttributeIDDisplayName},
		}})
		if err != nil {
			return err
		}
		if len(resp.Results) != 2 || resp.Results[0].Status != ua.StatusOK || resp.Results[1].Status != ua.StatusOK {
			return fmt.Errorf("read results %+v", resp.Results)
		}
		if lvl := levelOf(t, resp.Results[0]); lvl != ts.ServiceLevel() {
			return fmt.Errorf("ServiceLevel %d, server says %d", lvl, ts.ServiceLevel())
		}
		return nil
	}
	start := time.Now()
	testwait.For(t, 20*time.Second, "a client served after the library stopped taking connections", func() bool {
		return tryRead() == nil
	})
	t.Logf("served again %v after the reset", time.Since(start).Round(time.Millisecond))
	if now := ts.lib.Load().backend; now == old {
		t.Fatalf("the library still listens on %s: it was not replaced", now)
	}
	if n, _, _ := promtest.Value(ts.reg, "scadad_opcua_server_restarts_total", ""); n != 1 {
		t.Fatalf("scadad_opcua_server_restarts_total = %v, want 1", n)
	}
	// Another report within the restart gap leaves the new library be; once
	// the gap has passed, it is replaced again.
	current := ts.lib.Load().backend
	ts.restartLibrary(current, errors.New("a second report"))
	if now := ts.lib.Load().backend; now != current {
		t.Fatalf("replaced again within the restart gap (%s -> %s)", current, now)
	}
	ts.restartMu.Lock()
	ts.restartGap = 0
	ts.restartMu.Unlock()
	ts.restartLibrary(current, errors.New("a report after the gap"))
	if now := ts.lib.Load().backend; now == current {
		t.Fatal("not replaced after the restart gap")
	}
	if n, _, _ := promtest.Value(ts.reg, "scadad_opcua_server_restarts_total", ""); n != 2 {
		t.Fatalf("scadad_opcua_server_restarts_total = %v, want 2", n)
	}
	// The old library's client was disconnected: its next read fails.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := before.Read(ctx, &ua.ReadRequest{NodesToRead: []*ua.ReadValueID{{NodeID: serviceLevelID, AttributeID: ua.AttributeIDValue}}}); err == nil {
		t.Fatal("a session on the replaced library still reads")
	}
}
