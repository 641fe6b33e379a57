package mqtttarget

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"sync"

	"github.com/eclipse/paho.golang/packets"
)

// A broker keeps one connection's QoS 1 publishes in the order it reads
// them, so a batch can be published without waiting for each PUBACK as
// long as its publishes reach the connection in batch order. paho.golang
// writes a publish from the goroutine that makes it and says nothing of
// when it is written; publishes made from several goroutines reach the
// wire in any order. The sender therefore makes the next publish only once
// the connection reports the previous one written: wireConn sees every
// packet the client writes and names each PUBLISH by its message id.

// wireWatch is the batch's publishes not yet seen on the wire.
type wireWatch struct {
	mu      sync.Mutex
	pending map[string]chan struct{}
}

// expect returns a channel closed when the publish of message id is
// written to the connection.
func (w *wireWatch) expect(id string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending == nil {
		w.pending = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	w.pending[id] = ch
	return ch
}

// forget drops id's channel (its publish ended without being seen).
func (w *wireWatch) forget(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.pending, id)
}

// written reports that the publish of message id was written.
func (w *wireWatch) written(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch, ok := w.pending[id]; ok {
		close(ch)
		delete(w.pending, id)
	}
}

// dialWire connects to the broker at address, over TLS with cfg when cfg
// is not nil, and watches what the client writes with w.
func dialWire(ctx context.Context, address string, cfg *tls.Config, w *wireWatch) (net.Conn, error) {
	var (
		c   net.Conn
		err error
	)
	if cfg != nil {
		c, err = (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", address)
	} else {
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", address)
	}
	if err != nil {
		return nil, err
	}
	wc := &wireConn{Conn: c, watch: w, in: bufio.NewReaderSize(c, 16<<10)}
	wc.out.idle.L = &wc.out
	return wc, nil
}

// wireConn is the client's connection. paho.golang writes a packet as
// several buffers under the connection's lock when it is a sync.Locker:
// wireConn gathers them into whole packets and queues each, reporting a
// PUBLISH to its watch as it is queued (the queue is the wire's order).
// The goroutine that queues a packet while no write is under way writes
// the queue, and goes on with what others queued meanwhile: publishes in
// flight together leave in one system call (one TLS record), not one each.
type wireConn struct {
	net.Conn
	watch *wireWatch
	// in buffers what the client reads: it reads a packet a few bytes at
	// a time (type, length, body), a system call each without it.
	in *bufio.Reader

	// mu holds one packet's writes (Lock to Unlock).
	mu     sync.Mutex
	locked bool
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
	c.locked, c.packet, c.size = true, c.packet[:0], 0
}

// Unlock ends them (a packet shorter than its header said, never from
// paho, is queued as it is) and writes the queue unless a write is under
// way.
func (c *wireConn) Unlock() {
	if len(c.packet) > 0 {
		c.queue(c.packet)
		c.packet = c.packet[:0]
	}
	c.locked = false
	c.mu.Unlock()
	c.flush()
}

// Write gathers a locked packet's buffers and queues the packet once it is
// whole; a write outside Lock (never from paho) is queued and written at
// once. A connection that failed to write answers with that error.
func (c *wireConn) Write(b []byte) (int, error) {
	if err := c.failed(); err != nil {
		return 0, err
	}
	if !c.locked {
		c.queue(b)
		c.flush()
		return len(b), c.failed()
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

// queue appends a packet to what is to be written and reports a publish.
func (c *wireConn) queue(packet []byte) {
	c.out.Lock()
	c.out.queued = append(c.out.queued, packet...)
	c.out.Unlock()
	if id, ok := publishedID(packet); ok {
		c.watch.written(id)
	}
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

// publishedID is the message id of a PUBLISH packet (its user property
// UserPropertyMessageID), false for any other packet. It reads the
// variable header in place: decoding the whole packet would copy the
// payload of every publish.
func publishedID(packet []byte) (string, bool) {
	if len(packet) == 0 || packet[0]>>4 != packets.PUBLISH {
		return "", false
	}
	qos := packet[0] >> 1 & 3
	r := wireReader{b: packet, at: 1}
	r.varint() // remaining length
	r.skip(int(r.uint16()))
	if qos > 0 {
		r.skip(2)
	}
	end := r.varint()
	end += r.at
	for r.ok() && r.at < end {
		id := r.byte()
		switch id {
		case 0x26: // user property: two strings
			key := r.str()
			value := r.str()
			if r.ok() && key == UserPropertyMessageID {
				return value, true
			}
		case 0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2a:
			r.skip(1)
		case 0x13, 0x21, 0x22, 0x23:
			r.skip(2)
		case 0x02, 0x11, 0x18, 0x27:
			r.skip(4)
		case 0x0b:
			r.varint()
		case 0x03, 0x08, 0x09, 0x12, 0x15, 0x16, 0x1a, 0x1c, 0x1f:
			r.skip(int(r.uint16())) // a string or binary data
		default:
			return "", false
		}
	}
	return "", false
}

// wireReader reads MQTT's encodings from b; a read past the end leaves
// it not ok and reads zeros.
type wireReader struct {
	b  []byte
	at int
}

func (r *wireReader) ok() bool { return r.at <= len(r.b) }

func (r *wireReader) skip(n int) { r.at += n }

func (r *wireReader) byte() byte {
	r.at++
	if r.at > len(r.b) {
		return 0
	}
	return r.b[r.at-1]
}

func (r *wireReader) uint16() uint16 {
	return uint16(r.byte())<<8 | uint16(r.byte())
}

func (r *wireReader) varint() int {
	v := 0
	for shift := 0; shift < 28; shift += 7 {
		b := r.byte()
		v |= int(b&0x7f) << shift
		if b&0x80 == 0 {
			break
		}
	}
	return v
}

func (r *wireReader) str() string {
	n := int(r.uint16())
	if r.at+n > len(r.b) {
		r.at = len(r.b) + 1
		return ""
	}
	r.at += n
	return string(r.b[r.at-n : r.at])
}
