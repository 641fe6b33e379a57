package grpcdial

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// frameCounter counts the HTTP/2 PINGs (not their acks) in one direction
// of a connection's byte stream.
type frameCounter struct {
	skip  int // the client preface, before the first frame
	buf   []byte
	pings int
}

func (f *frameCounter) feed(p []byte) {
	f.buf = append(f.buf, p...)
	if f.skip > 0 {
		n := min(f.skip, len(f.buf))
		f.buf, f.skip = f.buf[n:], f.skip-n
	}
	for len(f.buf) >= 9 {
		length := int(f.buf[0])<<16 | int(binary.BigEndian.Uint16(f.buf[1:3]))
		if len(f.buf) < 9+length {
			return
		}
		const framePing, flagAck = 0x6, 0x1
		if f.buf[3] == framePing && f.buf[4]&flagAck == 0 {
			f.pings++
		}
		f.buf = f.buf[9+length:]
	}
}

// countingConn is the server's side of a connection, counting the PINGs
// each way.
type countingConn struct {
	net.Conn
	mu             sync.Mutex
	fromClient, to *frameCounter
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.fromClient.feed(p[:n])
	c.mu.Unlock()
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.to.feed(p)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *countingConn) pings() (fromClient, toClient int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fromClient.pings, c.to.pings
}

type countingListener struct {
	net.Listener
	conns chan *countingConn
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &countingConn{Conn: c, fromClient: &frameCounter{skip: len("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")}, to: &frameCounter{}}
	l.conns <- cc
	return cc, nil
}

// TestControlCallsSendNoBandwidthPings: with grpc-go's defaults, each side
// of a connection sends a PING when DATA arrives and none is outstanding
// (its bandwidth-delay estimator), so a connection carrying one small call
// at a time exchanged a PING and its ack per call each way, doubling the
// syscalls of an enqueue on both ends. The control API's fixed windows
// turn the estimator off on both sides: a hundred calls, no PING.
func TestControlCallsSendNoBandwidthPings(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := countingListener{Listener: ln, conns: make(chan *countingConn, 4)}
	srv := grpc.NewServer(ServerFlowControl()...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(cl)
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), append(FlowControl(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < 100; i++ {
		if _, err := api.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	var sc *countingConn
	select {
	case sc = <-cl.conns:
	case <-ctx.Done():
		t.Fatal("the server accepted no connection")
	}
	if from, to := sc.pings(); from != 0 || to != 0 {
		t.Errorf("100 calls: the client sent %d PINGs and the server %d; want none (fixed windows, no bandwidth estimator)", from, to)
	}
}
