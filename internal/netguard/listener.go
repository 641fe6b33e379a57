package netguard

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/scadad/scadad/internal/backoff"
)

// Limits bound one listener. Zero means no bound.
type Limits struct {
	// MaxConns is how many accepted connections may be open at once: the
	// listener's share of the process's file descriptors.
	MaxConns int
	// MaxConnsPerAddr is how many of them one client IP address may hold.
	MaxConnsPerAddr int
}

// Refusal reasons, as counted by Events.Refused.
const (
	RefusedTotal   = "total"
	RefusedPerAddr = "per_address"
)

// Events is told what the listener does; every field may be nil.
type Events struct {
	// AcceptError: accepting failed with a temporary error (err), and the
	// listener waits delay before trying again.
	AcceptError func(err error, delay time.Duration)
	// Refused: a connection was accepted and closed at once, over a limit.
	Refused func(reason string)
	// Open is the number of connections open after a change.
	Open func(n int)
}

// Retry delays after a temporary accept error: the first retry is soon
// (another part may close a descriptor at any moment), and a machine out
// of descriptors is asked at most once a second.
const (
	retryFloor = 5 * time.Millisecond
	retryMax   = time.Second
)

// Listener is a net.Listener with Limits that retries temporary accept
// errors. Its Accept returns an error only when the listener itself has
// failed or been closed.
type Listener struct {
	net.Listener
	limits Limits
	events Events
	// rand draws the retry jitter; sleep waits (or ends early on Close).
	rand func() float64

	mu      sync.Mutex
	open    int
	perAddr map[netip.Addr]int
	closed  chan struct{}
	once    sync.Once
}

// Wrap bounds l by limits; rand in [0,1) spreads retry delays (pass
// math/rand/v2.Float64).
func Wrap(l net.Listener, limits Limits, events Events, rand func() float64) *Listener {
	return &Listener{Listener: l, limits: limits, events: events, rand: rand,
		perAddr: map[netip.Addr]int{}, closed: make(chan struct{})}
}

// Accept waits for a connection within the limits. A connection over a
// limit is closed at once (with a reset, so it costs no TIME_WAIT) and not
// returned.
func (l *Listener) Accept() (net.Conn, error) {
	failures := 0
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !Temporary(err) {
				return nil, err
			}
			failures++
			delay := backoff.Delay(retryFloor, retryMax, failures, l.rand())
			if l.events.AcceptError != nil {
				l.events.AcceptError(err, delay)
			}
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-l.closed:
				t.Stop()
				return nil, net.ErrClosed
			}
			continue
		}
		failures = 0
		addr := remoteIP(c)
		if reason := l.admit(addr); reason != "" {
			refuse(c)
			if l.events.Refused != nil {
				l.events.Refused(reason)
			}
			continue
		}
		return &conn{Conn: c, l: l, addr: addr}, nil
	}
}

// Close closes the listener and ends a retry wait.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// Open is the number of accepted connections not yet closed.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

func (l *Listener) admit(addr netip.Addr) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limits.MaxConns > 0 && l.open >= l.limits.MaxConns {
		return RefusedTotal
	}
	if l.limits.MaxConnsPerAddr > 0 && addr.IsValid() && l.perAddr[addr] >= l.limits.MaxConnsPerAddr {
		return RefusedPerAddr
	}
	l.open++
	if addr.IsValid() {
		l.perAddr[addr]++
	}
	l.report(l.open)
	return ""
}

func (l *Listener) release(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if addr.IsValid() {
		if l.perAddr[addr]--; l.perAddr[addr] <= 0 {
			delete(l.perAddr, addr)
		}
	}
	l.report(l.open)
}

// report runs under mu so that the reported counts arrive in order.
func (l *Listener) report(n int) {
	if l.events.Open != nil {
		l.events.Open(n)
	}
}

type conn struct {
	net.Conn
	l    *Listener
	addr netip.Addr
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.addr) })
	return err
}

// Unwrap gives the accepted connection (for a server that asks for the
// *net.TCPConn underneath, e.g. to set keepalives).
func (c *conn) Unwrap() net.Conn { return c.Conn }

func remoteIP(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// refuse closes c with a reset: the client learns at once, and the
// refusal leaves no TIME_WAIT socket behind on this side.
func refuse(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// Temporary tells whether an accept error is a state of the machine that
// passes (out of descriptors or memory, a connection reset before it was
// accepted) rather than a failed listener.
func Temporary(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM, syscall.ENOBUFS,
			syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO:
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
