package pki

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
)

// ErrRevoked refuses a handshake with a certificate on the deny list.
var ErrRevoked = errors.New("certificate revoked")

// Revoked says whether the certificate serial (SerialHex) is on the
// site's deny list; it must be cheap, a handshake asks it.
type Revoked func(serial string) bool

// CheckRevoked is a tls.Config VerifyConnection check refusing a peer
// whose certificate is revoked.
func CheckRevoked(revoked Revoked) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		for _, c := range cs.PeerCertificates {
			if s := SerialHex(c); revoked(s) {
				return fmt.Errorf("%w: %q, serial %s", ErrRevoked, c.Subject.CommonName, s)
			}
		}
		return nil
	}
}

// RefuseRevoked makes cfg refuse, at every handshake, a peer whose
// certificate is revoked, after any VerifyConnection check it had.
func RefuseRevoked(cfg *tls.Config, revoked Revoked) {
	check, prev := CheckRevoked(revoked), cfg.VerifyConnection
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if prev != nil {
			if err := prev(cs); err != nil {
				return err
			}
		}
		return check(cs)
	}
}

// Tracker keeps the open connections of verified TLS peers, so those of a
// certificate revoked later can be closed: a revocation must cut off a
// stream already open, not only the next handshake.
type Tracker struct {
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker { return &Tracker{conns: make(map[*trackedConn]struct{})} }

type trackedConn struct {
	net.Conn
	t       *Tracker
	serials []string
	once    sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
	})
	return c.Conn.Close()
}

// Add tracks conn, whose handshake gave cs, until it is closed, and
// returns the conn to use in its place (its Close stops the tracking).
func (t *Tracker) Add(conn net.Conn, cs tls.ConnectionState) net.Conn {
	c := &trackedConn{Conn: conn, t: t}
	for _, cert := range cs.PeerCertificates {
		c.serials = append(c.serials, SerialHex(cert))
	}
	t.mu.Lock()
	t.conns[c] = struct{}{}
	t.mu.Unlock()
	return c
}

// CloseRevoked closes every tracked connection whose peer certificate is
// revoked and returns how many it closed.
func (t *Tracker) CloseRevoked(revoked Revoked) int {
	var doomed []*trackedConn
	t.mu.Lock()
	for c := range t.conns {
		for _, s := range c.serials {
			if revoked(s) {
				doomed = append(doomed, c)
				break
			}
		}
	}
	t.mu.Unlock()
	for _, c := range doomed {
		_ = c.Close()
	}
	return len(doomed)
}

// Len is how many connections are tracked.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// Listener wraps a TLS listener (tls.NewListener) so every accepted
// connection is tracked once its handshake is done. The connections it
// returns are still *tls.Conn underneath and keep ConnectionState and
// Handshake, which HTTP servers read.
func (t *Tracker) Listener(ln net.Listener) net.Listener { return trackingListener{Listener: ln, t: t} }

type trackingListener struct {
	net.Listener
	t *Tracker
}

func (l trackingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return conn, nil
	}
	return &lazyTracked{Conn: tc, t: l.t}, nil
}

// lazyTracked tracks a server-side TLS connection from its first read on,
// when the handshake (which the first read runs) has told who the peer is.
type lazyTracked struct {
	*tls.Conn
	t       *Tracker
	once    sync.Once
	tracked net.Conn
	mu      sync.Mutex
}

func (c *lazyTracked) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.once.Do(func() {
		if cs := c.Conn.ConnectionState(); cs.HandshakeComplete && len(cs.PeerCertificates) > 0 {
			c.mu.Lock()
			c.tracked = c.t.Add(c.Conn, cs)
			c.mu.Unlock()
		}
	})
	return n, err
}

func (c *lazyTracked) Close() error {
	c.mu.Lock()
	tracked := c.tracked
	c.mu.Unlock()
	if tracked != nil {
		return tracked.Close()
	}
	return c.Conn.Close()
}
