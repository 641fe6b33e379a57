//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/grpcdial"
	"github.com/scadad/scadad/internal/testcluster"
)

type client struct {
	conn *grpc.ClientConn
	api  controlpb.ControlClient
}

func (b *bench) client(n *testcluster.Node) (*client, error) {
	conn, err := grpc.NewClient(n.APIAddr, grpcdial.ControlAPI(b.tls)...)
	if err != nil {
		return nil, err
	}
	return &client{conn: conn, api: controlpb.NewControlClient(conn)}, nil
}

func (c *client) enqueue(ctx context.Context, id string, payload []byte) error {
	_, err := c.api.SFEnqueue(ctx, &controlpb.SFEnqueueRequest{Target: "bench", Id: id, Payload: payload})
	return err
}

func (c *client) Close() { c.conn.Close() }

// enqueuer is one connection's way to enqueue: the gRPC control API or
// the node's local HTTP endpoint.
type enqueuer interface {
	enqueue(ctx context.Context, id string, payload []byte) error
	Close()
}

// floorPath is where -api http-floor posts: a target no site of the
// bench's has, which the node refuses with 404 once it has read the
// request, before anything is stored.
const floorPath = "/v1/sf/no-such-target"

// checkAnswer says whether an answer with status is what the run expects:
// a 2xx, or want when want is set (the floor's refusal).
func checkAnswer(id string, status, want int, body []byte) error {
	switch {
	case want != 0 && status == want:
		return nil
	case want != 0:
		return fmt.Errorf("floor request %s: want HTTP %d, got %d: %s", id, want, status, bytes.TrimSpace(body))
	case status/100 != 2:
		return fmt.Errorf("enqueue %s: HTTP %d: %s", id, status, bytes.TrimSpace(body))
	}
	return nil
}

// httpEnqueuer posts to POST /v1/sf/bench over its own keep-alive
// connection.
type httpEnqueuer struct {
	url        string
	bearer     string // the Authorization header's value, if any
	wantStatus int    // 0: a 2xx; else this status (-api http-floor)
	cl         *http.Client
}

func (h *httpEnqueuer) enqueue(ctx context.Context, id string, payload []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", id)
	if h.bearer != "" {
		req.Header.Set("Authorization", h.bearer)
	}
	resp, err := h.cl.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	return checkAnswer(id, resp.StatusCode, h.wantStatus, body)
}

func (h *httpEnqueuer) Close() { h.cl.CloseIdleConnections() }

// connEnqueuer posts to POST /v1/sf/bench over keep-alive connections it
// holds itself: each request is written in one piece and its answer read
// with http.ReadResponse, as a load generator such as wrk does, without
// http.Transport's two goroutines and channel hand-offs per connection. A
// connection is used by one request at a time; a busy pool dials another.
type connEnqueuer struct {
	addr, path string
	tls        *tls.Config // nil: plain HTTP
	bearer     string      // the Authorization header's value, if any
	wantStatus int         // 0: a 2xx; else this status (-api http-floor)
	mu         sync.Mutex
	idle       []*benchConn
}

type benchConn struct {
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

func (h *connEnqueuer) get(ctx context.Context) (*benchConn, error) {
	h.mu.Lock()
	if n := len(h.idle); n > 0 {
		bc := h.idle[n-1]
		h.idle = h.idle[:n-1]
		h.mu.Unlock()
		return bc, nil
	}
	h.mu.Unlock()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", h.addr)
	if err != nil {
		return nil, err
	}
	if h.tls != nil {
		tc := tls.Client(c, h.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		c = tc
	}
	return &benchConn{c: c, br: bufio.NewReaderSize(c, 4096), bw: bufio.NewWriterSize(c, 4096)}, nil
}

func (h *connEnqueuer) enqueue(ctx context.Context, id string, payload []byte) error {
	bc, err := h.get(ctx)
	if err != nil {
		return err
	}
	status, body, keep, err := bc.post(ctx, h.addr, h.path, id, h.bearer, payload)
	if err != nil || !keep {
		bc.c.Close()
	} else {
		h.mu.Lock()
		h.idle = append(h.idle, bc)
		h.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("enqueue %s: %w", id, err)
	}
	return checkAnswer(id, status, h.wantStatus, body)
}

func (bc *benchConn) post(ctx context.Context, host, path, id, bearer string, payload []byte) (status int, body []byte, keep bool, err error) {
	dl, _ := ctx.Deadline()
	if err := bc.c.SetDeadline(dl); err != nil {
		return 0, nil, false, err
	}
	fmt.Fprintf(bc.bw, "POST %s HTTP/1.1\r\nHost: %s\r\nIdempotency-Key: %s\r\n", path, host, id)
	if bearer != "" {
		fmt.Fprintf(bc.bw, "Authorization: %s\r\n", bearer)
	}
	fmt.Fprintf(bc.bw, "Content-Length: %d\r\n\r\n", len(payload))
	bc.bw.Write(payload)
	if err := bc.bw.Flush(); err != nil {
		return 0, nil, false, err
	}
	resp, err := http.ReadResponse(bc.br, nil)
	if err != nil {
		return 0, nil, false, err
	}
	body, err = io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if err != nil {
		return 0, nil, false, err
	}
	return resp.StatusCode, body, !resp.Close, nil
}

func (h *connEnqueuer) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, bc := range h.idle {
		bc.c.Close()
	}
	h.idle = nil
}

// streamEnqueuer sends on one SFEnqueueStream. Answers come back in the
// order sent, so each answer goes to the oldest waiting sender.
type streamEnqueuer struct {
	conn   *grpc.ClientConn
	stream controlpb.Control_SFEnqueueStreamClient

	mu      sync.Mutex      // orders Send with its place in waiters
	waiters chan chan error // oldest first
}

func (b *bench) streamClient(n *testcluster.Node) (*streamEnqueuer, error) {
	c, err := b.client(n)
	if err != nil {
		return nil, err
	}
	stream, err := c.api.SFEnqueueStream(context.Background())
	if err != nil {
		c.Close()
		return nil, err
	}
	s := &streamEnqueuer{conn: c.conn, stream: stream, waiters: make(chan chan error, 1<<14)}
	go s.receive()
	return s, nil
}

func (s *streamEnqueuer) receive() {
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			// Fail whoever waits now and whoever comes later.
			for {
				(<-s.waiters) <- fmt.Errorf("enqueue stream: %w", err)
			}
		}
		var answer error
		if resp.Code != 0 {
			answer = fmt.Errorf("enqueue %s: code %d: %s", resp.Id, resp.Code, resp.Error)
		}
		(<-s.waiters) <- answer
	}
}

func (s *streamEnqueuer) enqueue(ctx context.Context, id string, payload []byte) error {
	answer := make(chan error, 1)
	s.mu.Lock()
	err := s.stream.Send(&controlpb.SFEnqueueRequest{Target: "bench", Id: id, Payload: payload})
	if err == nil {
		s.waiters <- answer
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case err := <-answer:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *streamEnqueuer) Close() {
	_ = s.stream.CloseSend()
	s.conn.Close()
}

// multi round-robins over several nodes' clients.
type multi struct {
	cs []enqueuer
	n  atomic.Uint64
}

func (m *multi) enqueue(ctx context.Context, id string, payload []byte) error {
	return m.cs[m.n.Add(1)%uint64(len(m.cs))].enqueue(ctx, id, payload)
}

func (m *multi) Close() {
	for _, c := range m.cs {
		c.Close()
	}
}

func (b *bench) clientFor(nodes []*testcluster.Node) (*multi, error) {
	m := &multi{}
	for _, n := range nodes {
		if b.o.api == "stream" {
			c, err := b.streamClient(n)
			if err != nil {
				return nil, err
			}
			m.cs = append(m.cs, c)
			continue
		}
		if b.o.overHTTP() {
			path, want := "/v1/sf/bench", 0
			if b.o.api == "http-floor" {
				path, want = floorPath, http.StatusNotFound
			}
			if b.o.httpClient == "conn" {
				m.cs = append(m.cs, &connEnqueuer{addr: n.HTTPAddr, path: path, tls: b.httpTLS, bearer: b.bearer, wantStatus: want})
				continue
			}
			scheme := "http://"
			if b.httpTLS != nil {
				scheme = "https://"
			}
			m.cs = append(m.cs, &httpEnqueuer{url: scheme + n.HTTPAddr + path, bearer: b.bearer, wantStatus: want,
				cl: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, TLSClientConfig: b.httpTLS}}})
			continue
		}
		c, err := b.client(n)
		if err != nil {
			return nil, err
		}
		if b.o.api == "floor" {
			m.cs = append(m.cs, floorEnqueuer{c})
			continue
		}
		m.cs = append(m.cs, c)
	}
	return m, nil
}

// floorEnqueuer makes SFEnqueue calls without a target: the server answers
// InvalidArgument before storing anything, so the rate measures the unary
// call itself (client, TLS, HTTP/2, server dispatch), not the store.
type floorEnqueuer struct{ *client }

func (f floorEnqueuer) enqueue(ctx context.Context, id string, payload []byte) error {
	_, err := f.api.SFEnqueue(ctx, &controlpb.SFEnqueueRequest{Id: id, Payload: payload})
	if status.Code(err) == codes.InvalidArgument {
		return nil
	}
	if err == nil {
		return errors.New("floor: the server accepted a message without a target")
	}
	return err
}
