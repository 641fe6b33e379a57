package control

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/pki"
)

// A peer that was unreachable for a while is reached again within about a
// second of its return: grpc's default reconnect backoff would by then
// wait several seconds between attempts.
func TestForwarderReachesAReturningPeerSoon(t *testing.T) {
	site, err := pki.GenerateSite("test", []string{"a", "b"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := site.ServerTLS("b")
	if err != nil {
		t.Fatal(err)
	}
	clientTLS, err := site.ClientTLS("a")
	if err != nil {
		t.Fatal(err)
	}
	serve := func(lis net.Listener) *grpc.Server {
		s := grpc.NewServer(grpc.Creds(credentials.NewTLS(serverTLS)))
		controlpb.RegisterControlServer(s, controlpb.UnimplementedControlServer{})
		go func() { _ = s.Serve(lis) }()
		return s
	}
	// A port below the ephemeral range: the server listens on it again
	// after 11 s, and an outgoing connection must not have taken it.
	ports, err := testcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(lis)
	f := NewForwarder("a", map[string]string{"b": addr}, clientTLS, nil, nil, 0)
	defer f.Close()
	cli, err := f.Client("b")
	if err != nil {
		t.Fatal(err)
	}
	// The stub answers Unimplemented: the call reached it.
	reached := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := cli.Status(ctx, &controlpb.StatusRequest{})
		return status.Code(err) == codes.Unimplemented
	}
	waitUntil := func(what string, timeout time.Duration) time.Duration {
		start := time.Now()
		for !reached() {
			if time.Since(start) > timeout {
				t.Fatalf("%s: not reached within %v", what, timeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return time.Since(start)
	}
	waitUntil("first connection", 5*time.Second)

	srv.Stop()
	// Callers keep trying while the peer is away, as forwards and the heal
	// probe do; with grpc's default backoff the next attempt after 11 s
	// away would come 2.5-7 s later.
	away := time.Now().Add(11 * time.Second)
	for time.Now().Before(away) {
		if reached() {
			t.Fatal("a stopped server answered")
		}
		time.Sleep(100 * time.Millisecond)
	}
	lis, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	defer serve(lis).Stop()
	if took := waitUntil("peer back", 20*time.Second); took > 2500*time.Millisecond {
		t.Fatalf("the returning peer was reached %v after it was back; reconnect attempts must stay about a second apart", took.Round(time.Millisecond))
	}
}

// Reset drops the connection to a peer: calls then dial a new one, which
// is how the heal gets past a connection stuck from before a partition.
func TestForwarderResetDialsAfresh(t *testing.T) {
	f := NewForwarder("a", map[string]string{"b": "127.0.0.1:1"}, nil, nil, nil, 0)
	defer f.Close()
	old, err := f.conn("b")
	if err != nil {
		t.Fatal(err)
	}
	f.Reset("b")
	if st := old.GetState(); st != connectivity.Shutdown {
		t.Errorf("old connection is %v after Reset, want Shutdown", st)
	}
	fresh, err := f.conn("b")
	if err != nil {
		t.Fatal(err)
	}
	if fresh == old {
		t.Error("Reset kept the old connection")
	}
	f.Reset("nobody") // an unknown peer is a no-op
}
