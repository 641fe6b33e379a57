package opcua

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// front owns the server's public TCP port and hands each connection to the
// library's listener, on loopback, only once the client's first message (a
// whole Hello) has arrived. The library's accept loop does that handshake
// itself, one connection at a time and without a deadline, and stops
// accepting for good when the handshake's read fails (WORKAROUNDS.md): a
// connection that says nothing held up every client after it, and one that
// reset before its Hello (a port scan, a load balancer's TCP check) left
// the endpoint refusing everyone until the process restarted. Past the
// front the library's handshake read finds the Hello already there.
//
// After the Hello the front copies bytes both ways and nothing else: it
// does not parse or alter OPC UA traffic.
type front struct {
	ln      net.Listener
	backend string // the library's loopback listener
	limits  frontLimits
	log     zerolog.Logger
	metrics *metrics

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{} // every connection the front holds
	// waiting counts connections whose Hello has not arrived yet.
	waiting int
	wg      sync.WaitGroup
}

type frontLimits struct {
	// hello bounds the wait for a connection's Hello.
	hello time.Duration
	// dial bounds connecting to the library's listener.
	dial time.Duration
	// maxWaiting bounds the connections waiting for their Hello; more are
	// closed at once (a scan or a flood must not pile up goroutines).
	maxWaiting int
	// stalled bounds a write to the client: a client that stops reading
	// is disconnected after it instead of holding up the library, whose
	// one goroutine writes every response and would wait on it for good.
	stalled time.Duration
}

// Why the front closed a connection before the library saw it (label
// reason of scadad_opcua_connections_refused_total).
const (
	refusedNoHello  = "no_hello"  // closed, reset or silent before a whole Hello
	refusedNotHello = "not_hello" // the first message was not a Hello
	refusedBusy     = "busy"      // too many connections waiting for their Hello
	refusedBackend  = "backend"   // the library's listener did not take it
)

// The first message of an OPC UA TCP connection (Part 6, 7.1.2): an 8-byte
// header, "HEL" + 'F' and a little-endian message size that includes it,
// then the Hello body. A Hello is five uint32s and an endpoint URL of at
// most 4096 bytes.
const (
	uacpHeaderLen = 8
	maxHelloLen   = uacpHeaderLen + 5*4 + 4 + 4096
)

const (
	defaultHelloTimeout = 10 * time.Second
	defaultFrontDial    = 2 * time.Second
	defaultMaxWaiting   = 256
	defaultStalled      = 10 * time.Second
)

func newFront(ln net.Listener, backend string, limits frontLimits, log zerolog.Logger, m *metrics) *front {
	return &front{ln: ln, backend: backend, limits: limits, log: log, metrics: m, conns: make(map[net.Conn]struct{})}
}

// run accepts until the listener is closed.
func (f *front) run() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: the listener
			// itself is fine; pause rather than spin.
			f.log.Warn().Err(err).Msg("opcua accept failed; retrying")
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if !f.admit(c) {
			c.Close()
			continue
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.serve(c)
		}()
	}
}

// admit tracks c unless the front is closed or too many connections wait
// for their Hello.
func (f *front) admit(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	if f.waiting >= f.limits.maxWaiting {
		f.metrics.refused.WithLabelValues(refusedBusy).Inc()
		return false
	}
	f.waiting++
	f.conns[c] = struct{}{}
	return true
}

// track adds c to the connections close closes; false once closed.
func (f *front) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *front) forget(c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, c)
}

func (f *front) helloDone() {
	f.mu.Lock()
	f.waiting--
	f.mu.Unlock()
}

// serve waits for c's Hello, connects to the library and passes the Hello
// and everything after it on, both ways, until either side ends.
func (f *front) serve(c net.Conn) {
	defer func() {
		c.Close()
		f.forget(c)
	}()
	hello, reason, err := readHello(c, f.limits.hello)
	f.helloDone()
	if err != nil {
		f.metrics.refused.WithLabelValues(reason).Inc()
		f.log.Debug().Err(err).Stringer("remote", c.RemoteAddr()).Str("reason", reason).Msg("opcua connection closed before the server saw it")
		return
	}
	d := net.Dialer{Timeout: f.limits.dial}
	b, err := d.Dial("tcp", f.backend)
	if err != nil {
		f.metrics.refused.WithLabelValues(refusedBackend).Inc()
		f.log.Warn().Err(err).Stringer("remote", c.RemoteAddr()).Msg("opcua connection not passed on: the server's own listener did not answer")
		return
	}
	defer func() {
		b.Close()
		f.forget(b)
	}()
	if !f.track(b) {
		return
	}
	if _, err := b.Write(hello); err != nil {
		f.metrics.refused.WithLabelValues(refusedBackend).Inc()
		return
	}
	f.metrics.connections.Inc()
	defer f.metrics.connections.Dec()
	if err := splice(c, b, f.limits.stalled); errors.Is(err, os.ErrDeadlineExceeded) {
		f.metrics.stalled.Inc()
		f.log.Warn().Stringer("remote", c.RemoteAddr()).Dur("stalled", f.limits.stalled).
			Msg("opcua client disconnected: it stopped reading what the server sent")
	}
}

// readHello reads c's first message with a deadline and returns it whole
// if it is a Hello; otherwise why not (a refused reason) and what failed.
func readHello(c net.Conn, timeout time.Duration) ([]byte, string, error) {
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return nil, refusedNoHello, fmt.Errorf("set hello deadline: %w", err)
	}
	msg := make([]byte, uacpHeaderLen, 64)
	if _, err := io.ReadFull(c, msg); err != nil {
		return nil, refusedNoHello, fmt.Errorf("read hello header: %w", err)
	}
	if string(msg[:4]) != "HELF" {
		return nil, refusedNotHello, fmt.Errorf("first message type %q, want HELF", msg[:4])
	}
	size := binary.LittleEndian.Uint32(msg[4:8])
	if size < uacpHeaderLen+5*4+4 || size > maxHelloLen {
		return nil, refusedNotHello, fmt.Errorf("hello of %d bytes, want %d..%d", size, uacpHeaderLen+5*4+4, maxHelloLen)
	}
	msg = append(msg, make([]byte, int(size)-uacpHeaderLen)...)
	if _, err := io.ReadFull(c, msg[uacpHeaderLen:]); err != nil {
		return nil, refusedNoHello, fmt.Errorf("read hello body: %w", err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return nil, refusedNoHello, fmt.Errorf("clear hello deadline: %w", err)
	}
	return msg, "", nil
}

// splice copies between the client and the library both ways until either
// direction ends, then closes both: OPC UA has no half-open state worth
// keeping, and a client that vanished must not hold the library's side
// open (nor the other way round). A write to the client that takes longer
// than stalled ends it too; the error says why it ended.
func splice(client, library net.Conn, stalled time.Duration) error {
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(library, client)
		done <- err
	}()
	go func() { done <- copyWithDeadline(client, library, stalled) }()
	err := <-done
	client.Close()
	library.Close()
	<-done
	return err
}

// copyWithDeadline is io.Copy with each write to dst bounded by d.
func copyWithDeadline(dst, src net.Conn, d time.Duration) error {
	buf := make([]byte, 32<<10)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if err := dst.SetWriteDeadline(time.Now().Add(d)); err != nil {
				return err
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// close stops accepting, closes every connection the front holds and waits
// for its goroutines at most wait.
func (f *front) close(wait time.Duration) {
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.ln.Close()
	done := make(chan struct{})
	go func() {
		f.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		f.log.Warn().Dur("waited", wait).Msg("opcua front connections still closing")
	}
}

// loopbackPort finds a free port on 127.0.0.1 for the library's listener.
// Another process could take it before the library listens; Start then
// fails with "address already in use" and says so.
func loopbackPort(ctx context.Context) (int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a loopback port for the opcua server: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
