package mqtttarget

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"sync"
)

// dialBroker connects to the broker at address, over TLS with cfg when cfg
// is not nil. What arrives is acknowledged at once: a broker with Nagle's
// algorithm on (Mosquitto's default) holds a batch's last PUBACKs until
// its previous segment is acknowledged, and this side, with nothing more
// to send, would delay that by 40 ms or more: a stall at the end of every
// batch.
func dialBroker(ctx context.Context, address string, cfg *tls.Config) (net.Conn, error) {
	tcp, err := (&net.Dialer{}).DialContext(ctx, "tcp", address)
	if err != nil {
		return nil, err
	}
	var c net.Conn = tcp
	if cfg != nil {
		tc := tls.Client(tcp, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			tcp.Close()
			return nil, err
		}
		c = tc
	}
	return ackedConn{Conn: c, quickAck: quickAck(tcp)}, nil
}

// dialWire is dialBroker's connection as a wireConn (paho.golang's).
func dialWire(ctx context.Context, address string, cfg *tls.Config) (net.Conn, error) {
	c, err := dialBroker(ctx, address, cfg)
	if err != nil {
		return nil, err
	}
	wc := &wireConn{Conn: c, in: bufio.NewReaderSize(c, 16<<10)}
	wc.out.idle.L = &wc.out
	return wc, nil
}

// ackedConn asks for quick acknowledgement after each read.
type ackedConn struct {
	net.Conn
	quickAck func()
}

func (c ackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.quickAck()
	return n, err
}

// wireConn is the client's connection. paho.golang writes a packet as
// several buffers under the connection's lock when it is a sync.Locker:
// wireConn gathers them into whole packets and queues each (the queue is
// the wire's order). The goroutine that queues a packet while no write is
// under way writes the queue, and goes on with what others queued
// meanwhile: publishes made together leave in one system call (one TLS
// record), not one each.
type wireConn struct {
	net.Conn
	// in buffers what the client reads: it reads a packet a few bytes at
	// a time (type, length, body), a system call each without it.
	in *bufio.Reader

	// mu holds one packet's writes (Lock to Unlock): paho writes every
	// packet under it.
	mu     sync.Mutex
	packet []byte
	size   int // the whole packet's length once its fixed header is in; 0 before, -1 if unreadable

	out struct {
		sync.Mutex
		queued, spare []byte
		writing       bool
		idle          sync.Cond // signalled when a writer stops
		err           error     // the connection's first write error
	}
}

// Read reads through the buffer (one reader: the client's).
func (c *wireConn) Read(b []byte) (int, error) { return c.in.Read(b) }

// Lock begins one packet's writes.
func (c *wireConn) Lock() {
	c.mu.Lock()
	c.packet, c.size = c.packet[:0], 0
}

// Unlock ends them (a packet shorter than its header said, never from
// paho, is queued as it is) and writes the queue unless a write is under
// way.
func (c *wireConn) Unlock() {
	if len(c.packet) > 0 {
		c.queue(c.packet)
		c.packet = c.packet[:0]
	}
	c.mu.Unlock()
	c.flush()
}

// Write gathers a locked packet's buffers and queues the packet once it is
// whole (the packets, when one write holds several whole ones). A
// connection that failed to write answers with that error.
func (c *wireConn) Write(b []byte) (int, error) {
	if err := c.failed(); err != nil {
		return 0, err
	}
	c.packet = append(c.packet, b...)
	if c.size == 0 {
		size, ok := packetSize(c.packet)
		switch {
		case ok:
			c.size = size
		case len(c.packet) < 5:
			return len(b), nil // the length goes on in the next buffer
		default:
			c.size = -1 // not framed as MQTT frames a packet: queued whole at Unlock
		}
	}
	if c.size > 0 && len(c.packet) >= c.size {
		c.queue(c.packet)
		c.packet, c.size = c.packet[:0], 0
	}
	return len(b), nil
}

func (c *wireConn) failed() error {
	c.out.Lock()
	defer c.out.Unlock()
	return c.out.err
}

// queue appends a packet to what is to be written.
func (c *wireConn) queue(packet []byte) {
	c.out.Lock()
	defer c.out.Unlock()
	c.out.queued = append(c.out.queued, packet...)
}

// flush writes the queue, and what is queued meanwhile, unless another
// goroutine is writing it. A write error closes the connection: the
// client's reader then fails and the client learns of it.
func (c *wireConn) flush() {
	c.out.Lock()
	defer c.out.Unlock()
	if c.out.writing {
		return
	}
	c.out.writing = true
	for len(c.out.queued) > 0 && c.out.err == nil {
		buf := c.out.queued
		c.out.queued = c.out.spare[:0]
		c.out.Unlock()
		_, err := c.Conn.Write(buf)
		c.out.Lock()
		c.out.spare = buf
		if err != nil {
			c.out.err = err
			c.Conn.Close()
		}
	}
	c.out.writing = false
	c.out.idle.Broadcast()
}

// Close writes what is queued (a DISCONNECT the client wrote last), then
// closes.
func (c *wireConn) Close() error {
	c.out.Lock()
	for c.out.writing {
		c.out.idle.Wait()
	}
	c.out.Unlock()
	c.flush()
	return c.Conn.Close()
}

// packetSize reads an MQTT fixed header (a type byte and the remaining
// length, one to four bytes of seven bits each) from the start of p: the
// whole packet's length.
func packetSize(p []byte) (int, bool) {
	remaining, shift := 0, 0
	for i := 1; i < len(p) && i <= 4; i++ {
		remaining |= int(p[i]&0x7f) << shift
		if p[i]&0x80 == 0 {
			return 1 + i + remaining, true
		}
		shift += 7
	}
	return 0, false
}
