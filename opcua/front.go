package opcua

import (
	"bufio"
	"context"
	"crypto/rsa"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
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
// After the Hello the front passes messages both ways, each re-secured by
// the connection's channelRelay (relay.go: the library's secure channel
// renews tokens wrongly), and refuses a channel the library would open but
// should not (a policy not offered, a certificate not trusted, Sign where
// only SignAndEncrypt is offered) and a request that the library's decoder
// would crash on (copyRequests).
type front struct {
	ln      net.Listener
	limits  frontLimits
	log     zerolog.Logger
	metrics *metrics
	// backendDead, when set, is told that the library's listener at
	// backend took a connection and did not answer its Hello, or did not
	// take it at all (why). It must not block.
	backendDead func(backend string, why error)
	// rules say which secure channels pass; channelRefused, when set, is
	// told of each refusal and must not block.
	rules          channelRules
	channelRefused func(remote net.Addr, why *channelRefusedError)
	// key and cert are the server's, with which the front terminates
	// each client's secure channel (relay.go); nil key: None only.
	key  *rsa.PrivateKey
	cert []byte

	mu       sync.Mutex
	backend  string // the library's loopback listener new connections go to
	closed   bool
	conns    map[net.Conn]struct{} // every connection the front holds
	backends map[net.Conn]string   // the library side of each, and its listener
	// waiting counts connections whose Hello has not arrived yet.
	waiting int
	wg      sync.WaitGroup
}

type frontLimits struct {
	// hello bounds the wait for a connection's Hello.
	hello time.Duration
	// answer bounds the wait for the library's answer to a Hello, which
	// a live library sends at once.
	answer time.Duration
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
	refusedNoHello     = "no_hello"        // closed, reset or silent before a whole Hello
	refusedNotHello    = "not_hello"       // the first message was not a Hello
	refusedBusy        = "busy"            // too many connections waiting for their Hello
	refusedBackend     = "backend"         // the library's listener did not take it
	refusedPolicy      = "security_policy" // an OpenSecureChannel asked for a policy not offered
	refusedMode        = "security_mode"   // a channel signs only where SignAndEncrypt alone is offered
	refusedCertificate = "certificate"     // a secure channel opened with a certificate not trusted
	refusedMalformed   = "malformed"       // a request in clear the library's decoder panics on
	refusedTooLarge    = "too_large"       // a request too large to check first
	refusedSecurity    = "security"        // a message the relay cannot open or pass on (signature, token)
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
	// defaultLibraryAnswer is how long the library may take to answer a
	// Hello before the server replaces it (Server.restartLibrary).
	defaultLibraryAnswer = 3 * time.Second
	defaultFrontDial     = 2 * time.Second
	defaultMaxWaiting    = 256
	defaultStalled       = 10 * time.Second
)

func newFront(ln net.Listener, backend string, limits frontLimits, log zerolog.Logger, m *metrics) *front {
	return &front{ln: ln, backend: backend, limits: limits, log: log, metrics: m,
		conns: make(map[net.Conn]struct{}), backends: make(map[net.Conn]string)}
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

// trackBackend adds b, connected to the library's listener at backend, to
// the connections close and closeBackend close; false once closed.
func (f *front) trackBackend(b net.Conn, backend string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[b] = struct{}{}
	f.backends[b] = backend
	return true
}

func (f *front) forget(c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, c)
	delete(f.backends, c)
}

// currentBackend is the library's listener new connections go to.
func (f *front) currentBackend() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.backend
}

// setBackend sends new connections to the library's listener at addr.
func (f *front) setBackend(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backend = addr
}

// closeBackend closes every connection to the library's listener at addr;
// each one's client side follows (splice).
func (f *front) closeBackend(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for b, at := range f.backends {
		if at == addr {
			b.Close()
		}
	}
}

// reportBackend tells backendDead, if set, that backend failed.
func (f *front) reportBackend(backend string, why error) {
	if f.backendDead != nil {
		f.backendDead(backend, why)
	}
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
	backend := f.currentBackend()
	d := net.Dialer{Timeout: f.limits.dial}
	b, err := d.Dial("tcp", backend)
	if err != nil {
		f.metrics.refused.WithLabelValues(refusedBackend).Inc()
		f.log.Warn().Err(err).Stringer("remote", c.RemoteAddr()).Msg("opcua connection not passed on: the server's own listener did not answer")
		if errors.Is(err, syscall.ECONNREFUSED) || os.IsTimeout(err) {
			// Its listener is gone or takes nothing; a local failure
			// (out of file descriptors) is no reason to replace it.
			f.reportBackend(backend, fmt.Errorf("connect to the library's listener: %w", err))
		}
		return
	}
	defer func() {
		b.Close()
		f.forget(b)
	}()
	if !f.trackBackend(b, backend) {
		return
	}
	if _, err := b.Write(hello); err != nil {
		f.metrics.refused.WithLabelValues(refusedBackend).Inc()
		return
	}
	// The library answers a Hello at once (Acknowledge or Error); a
	// listener that took the connection and says nothing has stopped
	// handshaking (WORKAROUNDS.md row 17).
	answer, err := readAnswer(b, f.limits.answer)
	if err != nil {
		f.metrics.refused.WithLabelValues(refusedBackend).Inc()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			f.log.Warn().Stringer("remote", c.RemoteAddr()).Dur("waited", f.limits.answer).
				Msg("opcua connection dropped: the server's own listener did not answer its Hello")
			f.reportBackend(backend, fmt.Errorf("the library did not answer a Hello within %v", f.limits.answer))
		}
		return
	}
	if err := c.SetWriteDeadline(time.Now().Add(f.limits.stalled)); err != nil {
		return
	}
	if _, err := c.Write(answer); err != nil {
		return
	}
	f.metrics.connections.Inc()
	defer f.metrics.connections.Dec()
	err = splice(c, b, f.limits.stalled, f.rules, newChannelRelay(f.key, f.cert))
	var refused *channelRefusedError
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		f.metrics.stalled.Inc()
		f.log.Warn().Stringer("remote", c.RemoteAddr()).Dur("stalled", f.limits.stalled).
			Msg("opcua client disconnected: it stopped reading what the server sent")
	case errors.As(err, &refused):
		f.metrics.refused.WithLabelValues(refused.reason()).Inc()
		if f.channelRefused != nil {
			f.channelRefused(c.RemoteAddr(), refused)
		}
	}
}

// channelRules say which secure channels the front lets through to the
// library, which opens a channel with any policy and mode it knows.
type channelRules struct {
	// policies are the security policy URIs an OpenSecureChannel may ask
	// for (nil: any).
	policies map[string]bool
	// encryptOnly are the policies offered with SignAndEncrypt only: a
	// channel with one of them that signs without encrypting is refused.
	encryptOnly map[string]bool
	// discoveryOnly: no None profile is configured, so a None channel
	// carries discovery (GetEndpoints, FindServers) and nothing else, and
	// nothing in a request header's AdditionalHeader: what the library's
	// decoder is then given in clear, by anyone, holds no Variant.
	discoveryOnly bool
	// trusts, when set, checks the certificate a secure channel is opened
	// with (DER): the library would decrypt and decode whatever a client
	// with any certificate sends, and its decoder can be crashed
	// (WORKAROUNDS.md row 18).
	trusts func(der []byte) error
}

func (r channelRules) allows(policy string) bool { return r.policies == nil || r.policies[policy] }

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

// readAnswer reads what the library first sends back, waiting at most
// timeout.
func readAnswer(b net.Conn, timeout time.Duration) ([]byte, error) {
	if err := b.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	buf := make([]byte, 4096)
	n, err := b.Read(buf)
	if n == 0 && err == nil {
		err = io.ErrNoProgress
	}
	if err != nil {
		return nil, err
	}
	if err := b.SetReadDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// splice copies between the client and the library both ways until either
// direction ends, then closes both: OPC UA has no half-open state worth
// keeping, and a client that vanished must not hold the library's side
// open (nor the other way round). A write to the client that takes longer
// than stalled ends it too, and so does a channel the rules refuse; the
// error says why it ended.
func splice(client, library net.Conn, stalled time.Duration, rules channelRules, relay *channelRelay) error {
	done := make(chan error, 2)
	go func() { done <- copyRequests(library, client, rules, relay) }()
	go func() { done <- copyResponses(client, library, stalled, relay) }()
	err := <-done
	relay.close()
	client.Close()
	library.Close()
	<-done
	return err
}

// maxOPNLen bounds an OpenSecureChannel message, which carries a
// certificate or two: a few KiB in practice. maxClassifiedLen bounds a
// request read whole (to tell a signed-only channel from an encrypted one,
// or to decode a request in clear first), its chunks put together: a
// larger one is refused, since unread it would reach the library's
// decoder unchecked. Requests are small (a Write of 1,000 values is tens
// of KiB).
const (
	maxOPNLen        = 1 << 20
	maxClassifiedLen = 1 << 20
)

// channelRefusedError ends a connection the rules refuse: a policy not
// offered, Sign where only SignAndEncrypt is, a certificate not trusted, or
// a request in clear that the library's decoder would crash on.
type channelRefusedError struct {
	policy string
	why    string        // says what was refused: the client is told
	detail string        // for the log only (where files live, what to do)
	label  string        // of scadad_opcua_connections_refused_total
	code   ua.StatusCode // of the Error message the client gets
}

func (e *channelRefusedError) Error() string         { return e.why }
func (e *channelRefusedError) logReason() string     { return e.why + e.detail }
func (e *channelRefusedError) reason() string        { return e.label }
func (e *channelRefusedError) status() ua.StatusCode { return e.code }

func policyNotOffered(policy string) *channelRefusedError {
	return &channelRefusedError{policy: policy, label: refusedPolicy, code: ua.StatusBadSecurityPolicyRejected,
		why: fmt.Sprintf("OpenSecureChannel with security policy %q, which this server does not offer", policy)}
}

func signOnly(policy string) *channelRefusedError {
	return &channelRefusedError{policy: policy, label: refusedMode, code: ua.StatusBadSecurityModeRejected,
		why: fmt.Sprintf("secure channel with security policy %q signs without encrypting, and this server offers that policy with SignAndEncrypt only", policy)}
}

func senderUntrusted(policy string, err error) *channelRefusedError {
	code := ua.StatusBadCertificateUntrusted
	var u *untrustedError
	if errors.As(err, &u) {
		code = u.code
	}
	why, detail := err.Error(), ""
	if u != nil {
		why, detail = u.why, u.advice
	}
	return &channelRefusedError{policy: policy, label: refusedCertificate, code: code, why: why, detail: detail}
}

func notDiscovery(why string) *channelRefusedError {
	return &channelRefusedError{policy: ua.SecurityPolicyURINone, label: refusedMode, code: ua.StatusBadSecurityModeRejected,
		why: "a channel without security carries discovery only here: " + why}
}

func tooLarge(policy string, size int) *channelRefusedError {
	return &channelRefusedError{policy: policy, label: refusedTooLarge, code: ua.StatusBadRequestTooLarge,
		why: fmt.Sprintf("a request of %d bytes in clear (or before the channel's mode is known), more than %d", size, maxClassifiedLen)}
}

func undecodable(policy string, panicked any) *channelRefusedError {
	return &channelRefusedError{policy: policy, label: refusedMalformed, code: ua.StatusBadDecodingError,
		why: fmt.Sprintf("a request the OPC UA decoder cannot take (%v)", panicked)}
}

func overEncodingLimits(policy string, err error) *channelRefusedError {
	return &channelRefusedError{policy: policy, label: refusedMalformed, code: ua.StatusBadEncodingLimitsExceeded,
		why: "a request over the decoder's limits: " + err.Error()}
}

// copyRequests passes the client's messages to the library, each read
// whole (Part 6, 7.1.2: an 8-byte header with the message size) and
// re-secured by relay, and refuses a channel the rules do not allow:
//   - an OpenSecureChannel whose security policy is not offered, or whose
//     certificate is not trusted (its asymmetric security header, never
//     encrypted, names both);
//   - on a policy offered with SignAndEncrypt only, a channel that signs
//     without encrypting (the relay reads the mode from the
//     OpenSecureChannel request);
//   - a message the relay cannot open (a signature that does not verify,
//     a token the channel does not know);
//   - a request the library's decoder panics on (WORKAROUNDS.md row 18):
//     the relay gives every request in clear, whatever the channel's mode,
//     and each is decoded here first, where a panic is recovered.
//
// A refusal is answered with an Error message, and the connection closed.
// Before a session the library has nothing else to send; later it may be
// writing a Publish response at that moment, and the client then gets the
// Error between two pieces of it: a connection about to close either way.
func copyRequests(library net.Conn, client net.Conn, rules channelRules, relay *channelRelay) error {
	r := bufio.NewReaderSize(client, 64<<10)
	w := bufio.NewWriterSize(library, 64<<10)
	hdr := make([]byte, uacpHeaderLen)
	var ch channelState
	refuse := func(e *channelRefusedError) error {
		_ = w.Flush() // what was let through before goes on
		_ = client.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = client.Write(errorMessage(e.status(), e.Error()))
		return e
	}
	for {
		msg, err := readMessage(r, hdr, symHeaderLen, requestLimit)
		var big *oversizeError
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.As(err, &big) && big.kind != "OPN":
			// Too large to read whole and check first.
			return refuse(tooLarge(ch.policy, big.size))
		case err != nil:
			return fmt.Errorf("read a client message: %w", err)
		}
		kind := string(msg[:3])
		if kind == "OPN" {
			policy, cert := openSecurity(msg)
			if !rules.allows(policy) {
				return refuse(policyNotOffered(policy))
			}
			if policy != ua.SecurityPolicyURINone && rules.trusts != nil {
				if err := rules.trusts(cert); err != nil {
					return refuse(senderUntrusted(policy, err))
				}
			}
		}
		out, body, err := relay.fromClient(msg)
		if err != nil {
			return refuse(relayRefused(ch.policy, err))
		}
		if kind == "OPN" {
			if e := ch.opened(relay, rules, body); e != nil {
				return refuse(e)
			}
		} else if e := ch.request(msg[3], body); e != nil {
			return refuse(e)
		}
		if _, err := w.Write(out); err != nil {
			return err
		}
		// Several messages already read go on in one write; but an
		// OpenSecureChannel goes at once: the client's next message waits
		// for its answer (channelRelay.awaitOpen), and would otherwise
		// wait for an answer to a request still in this buffer.
		if kind == "OPN" || r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// relayRefused is the refusal of a message the relay could not pass on.
func relayRefused(policy string, err error) *channelRefusedError {
	code := ua.StatusBadSecurityChecksFailed
	var re *relayError
	if errors.As(err, &re) {
		code = re.code
	}
	return &channelRefusedError{policy: policy, label: refusedSecurity, code: code, why: err.Error()}
}

// copyResponses passes the library's messages to the client, each read
// whole and re-secured by relay, each write bounded by stalled.
func copyResponses(client, library net.Conn, stalled time.Duration, relay *channelRelay) error {
	r := bufio.NewReaderSize(library, 64<<10)
	hdr := make([]byte, uacpHeaderLen)
	for {
		msg, err := readMessage(r, hdr, uacpHeaderLen, func(string) int { return maxServerMessageLen })
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read a server message: %w", err)
		}
		out, err := relay.fromLibrary(msg)
		if err != nil {
			return fmt.Errorf("pass on the server's %s message: %w", msg[:3], err)
		}
		if err := client.SetWriteDeadline(time.Now().Add(stalled)); err != nil {
			return err
		}
		if _, err := client.Write(out); err != nil {
			return err
		}
	}
}

// maxServerMessageLen bounds a message chunk from the library, which
// splits what it sends into chunks of the negotiated size (64 KiB).
const maxServerMessageLen = 16 << 20

// channelState is what copyRequests knows of a client's secure channel.
type channelState struct {
	policy        string
	discoveryOnly bool // a None channel on a site without a None profile
	// pending holds the bodies of a request's chunks before its last.
	pending []byte
}

// opened checks the channel's OpenSecureChannel request (body, in clear).
func (c *channelState) opened(relay *channelRelay, rules channelRules, body []byte) *channelRefusedError {
	relay.mu.Lock()
	policy, mode := relay.policy, relay.mode
	relay.mu.Unlock()
	*c = channelState{policy: policy, discoveryOnly: policy == ua.SecurityPolicyURINone && rules.discoveryOnly}
	if mode == ua.MessageSecurityModeSign && rules.encryptOnly[policy] {
		return signOnly(policy)
	}
	if c.discoveryOnly && (len(body) < 4 || !plainRequestHeader(body[4:])) {
		return notDiscovery("an OpenSecureChannel request header with an AdditionalHeader, or malformed")
	}
	return checkDecodable(policy, body)
}

// request looks at one chunk of a request (its body in clear) and says why
// it is refused, if it is. The chunks of a request are put together (up to
// maxClassifiedLen) and the whole request is decoded first.
func (c *channelState) request(chunk byte, body []byte) *channelRefusedError {
	switch chunk {
	case 'C':
		if len(c.pending)+len(body) > maxClassifiedLen {
			return tooLarge(c.policy, len(c.pending)+len(body))
		}
		c.pending = append(c.pending, body...)
		return nil
	case 'A':
		c.pending = nil
		return nil
	}
	whole := append(c.pending, body...)
	c.pending = nil
	if c.discoveryOnly {
		if why := discoveryRequest(whole); why != "" {
			return notDiscovery(why)
		}
	}
	return checkDecodable(c.policy, whole)
}

// discoveryTypes are the requests a None channel carries on a site that
// offers no None profile: what a client needs to find the secure
// endpoints, and the channel's close. Their fields are strings and arrays
// of strings, which the decoder bounds by the message's length.
var discoveryTypes = map[uint16]bool{
	id.CloseSecureChannelRequest_Encoding_DefaultBinary:   true,
	id.GetEndpointsRequest_Encoding_DefaultBinary:         true,
	id.FindServersRequest_Encoding_DefaultBinary:          true,
	id.FindServersOnNetworkRequest_Encoding_DefaultBinary: true,
}

// discoveryRequest says why body (type id and request, in clear) is not a
// plain discovery request: another type, or a request header whose
// AdditionalHeader carries something (an extension object, which could
// hold any registered type). "" when it is one.
func discoveryRequest(body []byte) string {
	if len(body) < 4 || body[0] != byte(ua.NodeIDTypeFourByte) || body[1] != 0 {
		return "a request type id that is not a service's"
	}
	typ := binary.LittleEndian.Uint16(body[2:])
	if !discoveryTypes[typ] {
		return fmt.Sprintf("request type %d on a channel without security; this server offers sessions on Sign or SignAndEncrypt channels only", typ)
	}
	if !plainRequestHeader(body[4:]) {
		return "a request header with an AdditionalHeader, or malformed"
	}
	return ""
}

// plainRequestHeader reports whether b starts with a RequestHeader (Part
// 4, 7.32) whose AdditionalHeader is empty: an authentication token node
// id, a timestamp, the request handle, the diagnostics mask, an audit
// entry id, a timeout hint, then the extension object's type id and an
// encoding byte of 0 (no body).
func plainRequestHeader(b []byte) bool {
	at, ok := skipNodeID(b, 0)
	if !ok {
		return false
	}
	at += 8 + 4 + 4 // timestamp, request handle, return diagnostics
	if _, at = lengthPrefixed(b, at); at > len(b) {
		return false
	}
	at += 4 // timeout hint
	if at, ok = skipNodeID(b, at); !ok || at >= len(b) {
		return false
	}
	return b[at] == 0
}

// skipNodeID returns where the NodeId (binary encoding, Part 6, 5.2.2.9)
// at b[at:] ends. An expanded node id's flags are refused: a request
// header has none.
func skipNodeID(b []byte, at int) (int, bool) {
	if at >= len(b) {
		return 0, false
	}
	size := 0
	switch ua.NodeIDType(b[at]) {
	case ua.NodeIDTypeTwoByte:
		size = 2
	case ua.NodeIDTypeFourByte:
		size = 4
	case ua.NodeIDTypeNumeric:
		size = 7
	case ua.NodeIDTypeGUID:
		size = 19
	case ua.NodeIDTypeString, ua.NodeIDTypeByteString:
		_, end := lengthPrefixed(b, at+3)
		return end, end <= len(b) && at+7 <= len(b)
	default:
		return 0, false
	}
	return at + size, at+size <= len(b)
}

// checkDecodable says why the library's decoder must not be given a
// request body (type id and request): what would make it allocate far
// more than the body holds, or nest without end (predecode.go), or what
// it panics on.
func checkDecodable(policy string, body []byte) *channelRefusedError {
	if err := checkEncodingLimits(body); err != nil {
		return overEncodingLimits(policy, err)
	}
	if p := decodePanic(body); p != nil {
		return undecodable(policy, p)
	}
	return nil
}

// decodePanic decodes a request body (type id and request) as the
// library will, and returns what the decoder panicked with, if it did.
// A decoding error is not ours to judge: the library answers it.
func decodePanic(body []byte) (panicked any) {
	defer func() { panicked = recover() }()
	_, _, _ = ua.DecodeService(body)
	return nil
}

// requestLimit bounds a client message of a kind: an OpenSecureChannel
// carries certificates, anything else is read whole to be checked first.
func requestLimit(kind string) int {
	if kind == "OPN" {
		return maxOPNLen
	}
	return maxClassifiedLen
}

// oversizeError is a message larger than its reader takes: its header
// was read, its body was not.
type oversizeError struct {
	kind        string
	size, limit int
}

func (e *oversizeError) Error() string {
	return fmt.Sprintf("%s message of %d bytes, more than %d", e.kind, e.size, e.limit)
}

// readMessage reads one message (Part 6, 7.1.2: an 8-byte header whose
// size includes it) into a new slice, using hdr for its header: io.EOF
// when r ends before one starts, an *oversizeError when its size passes
// maxLen(its kind), unread.
func readMessage(r io.Reader, hdr []byte, minLen int, maxLen func(kind string) int) ([]byte, error) {
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err
	}
	size, kind := int(binary.LittleEndian.Uint32(hdr[4:8])), string(hdr[:3])
	if size < minLen {
		return nil, fmt.Errorf("%s message of %d bytes, shorter than its headers", kind, size)
	}
	if limit := maxLen(kind); size > limit {
		return nil, &oversizeError{kind: kind, size: size, limit: limit}
	}
	msg := make([]byte, size)
	copy(msg, hdr)
	if _, err := io.ReadFull(r, msg[uacpHeaderLen:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read a %s message of %d bytes: %w", kind, size, err)
	}
	return msg, nil
}

// openSecurity reads an OpenSecureChannel message's asymmetric security
// header (Part 6, 6.7.2.3): after the message header and the secure
// channel id, the security policy URI and the sender's certificate, each
// length-prefixed. "" and nil for what is missing or null.
func openSecurity(msg []byte) (policy string, cert []byte) {
	at := uacpHeaderLen + 4
	p, at := lengthPrefixed(msg, at)
	c, _ := lengthPrefixed(msg, at)
	return string(p), c
}

// lengthPrefixed reads a String or ByteString at b[at:] (an int32 length,
// -1 for null, then the bytes) and returns it and where the next field
// starts; nil when it is null or does not fit.
func lengthPrefixed(b []byte, at int) ([]byte, int) {
	if at < 0 || at+4 > len(b) {
		return nil, len(b)
	}
	n := int(int32(binary.LittleEndian.Uint32(b[at:])))
	at += 4
	if n <= 0 {
		return nil, at
	}
	if n > len(b)-at {
		return nil, len(b)
	}
	return b[at : at+n], at + n
}

// errorMessage is an OPC UA TCP Error message (Part 6, 7.1.2.5): a status
// code and a reason.
func errorMessage(code ua.StatusCode, reason string) []byte {
	size := uacpHeaderLen + 4 + 4 + len(reason)
	b := make([]byte, 0, size)
	b = append(b, "ERRF"...)
	b = binary.LittleEndian.AppendUint32(b, uint32(size))
	b = binary.LittleEndian.AppendUint32(b, uint32(code))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(reason)))
	return append(b, reason...)
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
	if !waitWithin(&f.wg, wait) {
		f.log.Warn().Dur("waited", wait).Msg("opcua front connections still closing")
	}
}

// waitWithin waits for wg at most d and reports whether it was done; a
// bounded shutdown wait, so the wall clock is used.
func waitWithin(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
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
