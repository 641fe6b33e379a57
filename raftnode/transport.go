package raftnode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/pki"
)

// ALPN protocols separate raft streams from liveness probes on the one port,
// so a probe never reaches raft's RPC decoder.
const (
	alpnRaft  = "scadad-raft/1"
	alpnProbe = "scadad-probe/1"
)

// handshakeTimeout bounds how long an accepted connection may take to finish
// its TLS handshake; it keeps a silent client from pinning a goroutine.
const handshakeTimeout = 5 * time.Second

// ErrNotMember is wrapped by transport errors about a peer that is not a
// configured member.
var ErrNotMember = errors.New("not a cluster member")

// memberDirectory answers who may talk raft with us. The node implements it
// from the configured members plus the live raft configuration.
type memberDirectory interface {
	idForAddr(addr string) (string, bool)
	isMember(id string) bool
}

// tlsStream is the node's long-lived mutual-TLS listener. It outlives raft
// transports: raft.Shutdown closes its transport, and the override restarts
// raft on a new one, so each transport gets a view (see view) while the
// listener, and with it the answers to peers' probes, stays up.
type tlsStream struct {
	raw       net.Listener
	advertise string
	server    *tls.Config
	client    *tls.Config
	// callerServer and callerClient are the VerifyConnection checks the
	// configurations came with.
	callerServer, callerClient func(tls.ConnectionState) error
	dir                        memberDirectory
	contact                    func(id string)
	status                     func() peerStatus
	log                        zerolog.Logger

	// conns tracks the raft connections by peer certificate (nil: none).
	conns *pki.Tracker
	// sessions lets the next dial of a member resume the TLS session of
	// the last one: probes run every few hundred milliseconds, and a full
	// mutual handshake signs and checks certificates on both sides.
	sessions sessionCaches

	accepted chan *trackedConn
	closed   chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
}

// peerStatus is what a node tells a probing peer about itself: enough for
// the prober to tell a returning peer (whose configuration still names it)
// from one that re-formed a cluster of its own (dual-active, not to be merged
// by re-adding it).
type peerStatus struct {
	ID     string   `json:"id"`
	State  string   `json:"state"`
	Term   uint64   `json:"term"`
	Epoch  uint64   `json:"epoch"`
	Leader string   `json:"leader"`
	Voters []string `json:"voters"`
}

// maxStatusBytes bounds what a probe reads from a peer.
const maxStatusBytes = 16 << 10

func newTLSStream(raw net.Listener, advertise string, server, client *tls.Config, dir memberDirectory, contact func(string), status func() peerStatus, log zerolog.Logger) *tlsStream {
	s := &tlsStream{
		raw:       raw,
		advertise: advertise,
		server:    server.Clone(),
		client:    client.Clone(),
		dir:       dir,
		contact:   contact,
		status:    status,
		log:       log,
		accepted:  make(chan *trackedConn),
		closed:    make(chan struct{}),
	}
	s.server.MinVersion = tls.VersionTLS13
	s.server.ClientAuth = tls.RequireAndVerifyClientCert
	s.server.NextProtos = []string{alpnRaft, alpnProbe}
	// A check the caller's configurations carry (the deny list of revoked
	// certificates) still runs, after the membership check.
	s.callerServer, s.callerClient = server.VerifyConnection, client.VerifyConnection
	s.server.VerifyConnection = s.verifyPeer("", s.callerServer)
	s.client.MinVersion = tls.VersionTLS13
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

// verifyPeer checks, after chain verification, that the peer's certificate
// names a member (want == "") or exactly the member we dialed.
func (s *tlsStream) verifyPeer(want string, caller func(tls.ConnectionState) error) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("peer presented no certificate")
		}
		cn := cs.PeerCertificates[0].Subject.CommonName
		if want != "" && cn != want {
			return fmt.Errorf("peer certificate is for %q, expected member %q", cn, want)
		}
		if !s.dir.isMember(cn) {
			return fmt.Errorf("peer certificate CN %q: %w", cn, ErrNotMember)
		}
		if caller != nil {
			return caller(cs)
		}
		return nil
	}
}

func (s *tlsStream) acceptLoop() {
	defer s.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		conn, err := s.raw.Accept()
		if err != nil {
			select {
			case <-s.closed:
				return
			default:
			}
			s.log.Error().Err(err).Msg("raft listener accept failed")
			select {
			case <-s.closed:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		s.wg.Add(1)
		go s.handshake(conn)
	}
}

func (s *tlsStream) handshake(raw net.Conn) {
	defer s.wg.Done()
	tc := tls.Server(raw, s.server)
	_ = tc.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := tc.Handshake(); err != nil {
		s.log.Warn().Str("remote", raw.RemoteAddr().String()).Str("reason", explainTLSError(err)).Err(err).
			Msg("refused raft connection: TLS handshake failed")
		_ = tc.Close()
		return
	}
	cs := tc.ConnectionState()
	peer := cs.PeerCertificates[0].Subject.CommonName
	switch cs.NegotiatedProtocol {
	case alpnProbe:
		s.contact(peer)
		if body, err := json.Marshal(s.status()); err == nil {
			_, _ = tc.Write(append(body, '\n'))
		}
		_ = tc.Close()
		return
	case alpnRaft:
	default:
		s.log.Warn().Str("remote", raw.RemoteAddr().String()).Str("peer", peer).Str("alpn", cs.NegotiatedProtocol).
			Msg("refused raft connection: client did not negotiate the raft protocol")
		_ = tc.Close()
		return
	}
	_ = tc.SetDeadline(time.Time{})
	s.contact(peer)
	select {
	case s.accepted <- &trackedConn{Conn: s.track(tc), peer: peer, contact: s.contact}:
	case <-s.closed:
		_ = tc.Close()
	case <-time.After(handshakeTimeout):
		// No raft transport is accepting (raft is restarting); the peer
		// will redial.
		_ = tc.Close()
	}
}

// track hands a raft connection to the tracker, when there is one, so a
// revocation of its peer's certificate closes it.
func (s *tlsStream) track(tc *tls.Conn) net.Conn {
	if s.conns == nil {
		return tc
	}
	return s.conns.Add(tc, tc.ConnectionState())
}

// dial opens a raft stream to the member at address.
func (s *tlsStream) dial(ctx context.Context, address string, alpn string) (*tls.Conn, string, error) {
	id, ok := s.dir.idForAddr(address)
	if !ok {
		return nil, "", fmt.Errorf("dial %s: %w: no member has this address", address, ErrNotMember)
	}
	cfg := s.client.Clone()
	// Peers are dialed by address but verified by member id, which every
	// node certificate carries as a SAN and as its CN.
	cfg.ServerName = id
	cfg.NextProtos = []string{alpn}
	cfg.VerifyConnection = s.verifyPeer(id, s.callerClient)
	cfg.ClientSessionCache = s.sessions.of(id)
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", address)
	if err != nil {
		s.sessions.forget(id)
		return nil, id, fmt.Errorf("dial member %s at %s: %s: %w", id, address, explainTLSError(err), err)
	}
	return conn.(*tls.Conn), id, nil
}

// probe checks that the member at address answers a mutual-TLS handshake
// for the probe protocol and returns the status it reports. A completed
// handshake counts as contact even if the status cannot be read: the peer
// is alive.
func (s *tlsStream) probe(ctx context.Context, address string) (peerStatus, error) {
	conn, id, err := s.dial(ctx, address, alpnProbe)
	if err != nil {
		return peerStatus{}, err
	}
	defer conn.Close()
	s.contact(id)
	// Reading to the server's close also surfaces, with TLS 1.3, a refusal
	// of our certificate.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl)
	}
	body, err := io.ReadAll(io.LimitReader(conn, maxStatusBytes))
	if err != nil {
		// With TLS 1.3 the member's refusal of a resumed session arrives
		// here: the next probe starts afresh.
		s.sessions.forget(id)
		return peerStatus{}, fmt.Errorf("probe member %s at %s: %s: %w", id, address, explainTLSError(err), err)
	}
	var st peerStatus
	if err := json.Unmarshal(body, &st); err != nil {
		return peerStatus{}, fmt.Errorf("probe member %s at %s: decode status: %w", id, address, err)
	}
	return st, nil
}

// sessionCaches holds a TLS session cache per member, so that a refusal
// drops the member's session without relying on crypto/tls's cache keys.
// A resumed handshake still runs both sides' VerifyConnection (membership
// and the deny list of revoked certificates) on the certificates of the
// session, and crypto/tls resumes only while they are unexpired and
// chain to the CAs configured now. A refusal of a resumed raft stream
// surfaces inside raft's transport, not here; the member's next probe
// (every few hundred milliseconds) is refused too and drops the session.
type sessionCaches struct {
	mu     sync.Mutex
	member map[string]tls.ClientSessionCache
}

// of returns member id's cache, made on first use.
func (c *sessionCaches) of(id string) tls.ClientSessionCache {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.member == nil {
		c.member = make(map[string]tls.ClientSessionCache)
	}
	cache, ok := c.member[id]
	if !ok {
		// crypto/tls keeps one session per server name, and every dial
		// of this member uses the member's id as its server name.
		cache = tls.NewLRUClientSessionCache(1)
		c.member[id] = cache
	}
	return cache
}

// forget drops member id's session: the next dial makes a full handshake.
func (c *sessionCaches) forget(id string) {
	c.mu.Lock()
	delete(c.member, id)
	c.mu.Unlock()
}

func (s *tlsStream) close() error {
	var err error
	s.once.Do(func() {
		close(s.closed)
		err = s.raw.Close()
	})
	s.wg.Wait()
	return err
}

// view is one raft transport's window onto the stream. Closing it closes
// the connections it handed out, not the listener.
type view struct {
	s      *tlsStream
	closed chan struct{}
	once   sync.Once
	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
}

var _ raft.StreamLayer = (*view)(nil)

func (s *tlsStream) newView() *view {
	return &view{s: s, closed: make(chan struct{}), conns: make(map[*trackedConn]struct{})}
}

// track records c as handed out by v: closing c forgets it, so a peer
// that redials for weeks does not grow the view. It returns false once v
// is closed.
func (v *view) track(c *trackedConn) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	select {
	case <-v.closed:
		return false
	default:
	}
	c.view = v
	v.conns[c] = struct{}{}
	return true
}

// Accept implements net.Listener.
func (v *view) Accept() (net.Conn, error) {
	select {
	case c := <-v.s.accepted:
		if !v.track(c) {
			_ = c.Close()
			return nil, net.ErrClosed
		}
		return c, nil
	case <-v.closed:
		return nil, net.ErrClosed
	case <-v.s.closed:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (v *view) Close() error {
	v.once.Do(func() {
		v.mu.Lock()
		close(v.closed)
		conns := v.conns
		v.conns = nil
		for c := range conns {
			_ = c.Conn.Close()
		}
		v.mu.Unlock()
	})
	return nil
}

// Addr implements net.Listener; raft uses it as this node's address.
func (v *view) Addr() net.Addr { return advertiseAddr(v.s.advertise) }

// Dial implements raft.StreamLayer.
func (v *view) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// A dial to a cut-off peer must not outlive the transport it is for.
	go func() {
		select {
		case <-v.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	conn, id, err := v.s.dial(ctx, string(address), alpnRaft)
	if err != nil {
		return nil, err
	}
	v.s.contact(id)
	tc := &trackedConn{Conn: v.s.track(conn), peer: id, contact: v.s.contact}
	if !v.track(tc) {
		_ = tc.Close()
		return nil, net.ErrClosed
	}
	return tc, nil
}

type advertiseAddr string

func (a advertiseAddr) Network() string { return "tcp" }
func (a advertiseAddr) String() string  { return string(a) }

// trackedConn is a raft connection: it records contact with its peer
// whenever bytes arrive (an inbound RPC or the answer to one of ours), and
// closing it forgets it in the view that handed it out.
type trackedConn struct {
	net.Conn
	peer    string
	contact func(string)

	view *view // set by view.track
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		if v := c.view; v != nil {
			v.mu.Lock()
			delete(v.conns, c) // a no-op once the view closed (conns is nil)
			v.mu.Unlock()
		}
	})
	return c.Conn.Close()
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.contact(c.peer)
	}
	return n, err
}

// explainTLSError turns handshake failures into the sentence an operator
// needs.
func explainTLSError(err error) string {
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	var alert tls.AlertError
	switch {
	case errors.As(err, &unknown):
		return "peer certificate is not signed by the site CA (foreign CA)"
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return "peer certificate is expired or not yet valid"
	case errors.As(err, &invalid):
		return "peer certificate is not valid for this use"
	case errors.As(err, &host):
		return "peer certificate does not name the member dialed"
	case errors.Is(err, ErrNotMember):
		return "peer certificate names no configured member"
	case errors.As(err, &alert):
		return "peer refused our certificate (" + alert.Error() + ")"
	case errors.Is(err, io.EOF):
		return "connection closed during handshake"
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		return "peer refused the handshake: it does not trust our certificate, or its own is from another site CA (" + op.Err.Error() + ")"
	}
	if errors.As(err, &op) && op.Op == "dial" {
		return "peer unreachable"
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return "handshake timed out"
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return "peer certificate failed verification"
	}
	return "TLS handshake failed"
}

func (n *Node) newTransport() *noPipelineTransport {
	return &noPipelineTransport{NetworkTransport: raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  n.stream.newView(),
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  n.hlog.Named("transport"),
	}), appends: &n.appends, leaderCopy: n.lead}
}

// noPipelineTransport is raft's network transport with pipelined
// replication turned off, so raft replicates with one AppendEntries at a
// time per follower (each still carrying every entry that is ready).
//
// raft v1.7's pipeline can deadlock: when a follower answers
// Success=false the response consumer returns, the transport's decoder
// blocks handing over the next response, and the sender blocks handing it
// the next request; the sender is the goroutine that would close the
// pipeline, so nothing ever unblocks. Replication to that follower stops
// while its heartbeats go on, and Shutdown waits forever (the fault suite
// caught an override hung in it after a pair split). grafana/pyroscope#5518
// analyses the same hang and also turns pipelining off.
type noPipelineTransport struct {
	*raft.NetworkTransport
	appends    *appendOutcomes
	leaderCopy *parallelLog // this node's log: a follower's answer waits for it
}

// AppendEntries implements raft.Transport, noting whether each follower
// stored what it was sent (see appendOutcomes). A follower's successful
// answer is handed to raft only once this node's own copy of the entries
// is on disk: raft counts a follower from its answer, and the leader's
// own copy as soon as it is queued (parallelLog), so this is what keeps a
// commit on two disks.
func (t *noPipelineTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	if len(args.Entries) > 0 && t.appends != nil {
		t.appends.note(string(id), err == nil && resp.Success)
	}
	if err == nil && resp.Success && len(args.Entries) > 0 && t.leaderCopy != nil {
		last := args.Entries[len(args.Entries)-1].Index
		if werr := t.leaderCopy.waitSynced(context.Background(), last); werr != nil {
			return fmt.Errorf("hold %s's answer until the leader's own copy is written: %w", id, werr)
		}
	}
	return err
}

// appendOutcomes remembers, per follower, whether the last AppendEntries
// carrying entries was stored. A follower that answers probes and
// heartbeats but refuses every append (its disk is full) must not be
// picked for a leadership hand-off: raft v1.7's transfer then blocks
// forever (leadershipTransfer waits to hand the replication goroutine a
// trigger while that goroutine retries the refused append without end), so
// every later transfer fails with "leadership transfer in progress" and
// the witness keeps leading with no Active node.
type appendOutcomes struct {
	mu    sync.Mutex
	last  map[string]appendOutcome
	count uint64 // outcomes noted so far
}

type appendOutcome struct {
	refused bool
	seq     uint64 // count when it was noted
}

func (a *appendOutcomes) note(id string, stored bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		a.last = make(map[string]appendOutcome)
	}
	a.count++
	a.last[id] = appendOutcome{refused: !stored, seq: a.count}
}

// mark returns a point to ask knowWhoStores about.
func (a *appendOutcomes) mark() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.count
}

// knowWhoStores reports whether the outcomes noted after mark suffice to
// pick a hand-off target among ids: one of them stored an append (it
// answers, so it is heard from most recently and picked first), or all of
// them answered. Waiting for every voter would wait out the deadline
// whenever one is down, which is exactly when a witness wins elections.
func (a *appendOutcomes) knowWhoStores(ids []string, mark uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	all := true
	for _, id := range ids {
		switch o := a.last[id]; {
		case o.seq <= mark:
			all = false
		case !o.refused:
			return true
		}
	}
	return all
}

// refusing reports whether id's last append with entries was not stored.
func (a *appendOutcomes) refusing(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last[id].refused
}

// AppendEntriesPipeline implements raft.Transport; raft falls back to
// plain AppendEntries on this error.
func (*noPipelineTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}
