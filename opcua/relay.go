package opcua

import (
	"crypto/rsa"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uapolicy"
)

// channelRelay re-secures one connection's secure channel between the
// client and the library (WORKAROUNDS.md row 19). The library answers an
// OpenSecureChannel Renew with the TokenId of the token it replaces and
// switches to the new keys at once; a client that follows Part 4, 5.5.2
// (node-opcua, the OPC Foundation stack) takes the answer for a stale one,
// keeps the old keys, and every request after it fails its security
// checks. The library offers no seam for it, so the front terminates the
// client's side of the channel itself, with gopcua's ua and uapolicy
// packages:
//
//   - toward the library it speaks as a client whose certificate is the
//     server's own: the front holds that key, so it reads the library's
//     OpenSecureChannel answers (the server nonce and TokenId inside) and
//     writes the client's OpenSecureChannel requests again for it;
//   - both sides of a token derive their keys from the same two nonces,
//     which the front passes on unchanged; only the TokenIds differ: the
//     client gets a new one for each token (the first is the library's);
//   - every message is opened (decrypted, its signature checked) with the
//     keys its sender used and sealed again with the keys its receiver
//     expects: the client's token on one side, the library's newest on the
//     other. Client messages after a Renew wait for the library's answer,
//     which tells the new keys. Messages to the client stay on the old
//     token until the client uses the new one (Part 4, 5.5.2.1 b);
//   - the front sees every request in clear, whatever the channel's mode,
//     so it can check what the library's decoder would choke on.
type channelRelay struct {
	key  *rsa.PrivateKey // the server's; nil: only None channels can open
	cert []byte          // the server's certificate (DER)
	wait time.Duration   // how long a request waits for the library's OpenSecureChannel answer

	mu         sync.Mutex
	policy     string
	mode       ua.MessageSecurityMode
	clientCert []byte
	toClient   *uapolicy.EncryptionAlgorithm // asymmetric: the server's key, the client's certificate
	toLibrary  *uapolicy.EncryptionAlgorithm // asymmetric: the server's key both ways
	opening    chan struct{}                 // closed when the OpenSecureChannel in flight is answered
	nonce      []byte                        // the client nonce of the OpenSecureChannel in flight
	tokens     []*relayToken                 // oldest first; the last is the library's current one
	sendWith   *relayToken                   // the token messages to the client are secured with
	closed     chan struct{}
	closeOnce  sync.Once
}

// relayToken is one SecurityToken of the channel: the keys both sides
// derived from the token's nonces, the TokenId the client knows it by and
// the one the library uses.
type relayToken struct {
	clientID, libraryID uint32
	server, client      *uapolicy.EncryptionAlgorithm // as the server, as the client
}

// maxRelayTokens bounds the tokens a channel keeps: the current one, the
// one before (messages in flight during a renewal) and a spare.
const maxRelayTokens = 3

// defaultOpenWait bounds the wait for the library's answer to an
// OpenSecureChannel.
const defaultOpenWait = 10 * time.Second

func newChannelRelay(key *rsa.PrivateKey, cert []byte) *channelRelay {
	return &channelRelay{key: key, cert: cert, wait: defaultOpenWait, closed: make(chan struct{})}
}

// close ends waits for an answer that will not come.
func (r *channelRelay) close() { r.closeOnce.Do(func() { close(r.closed) }) }

// relayError is a message the relay cannot pass on; code is the status the
// client is told.
type relayError struct {
	code ua.StatusCode
	why  string
}

func (e *relayError) Error() string { return e.why }

func relayFailed(code ua.StatusCode, format string, args ...any) *relayError {
	return &relayError{code: code, why: fmt.Sprintf(format, args...)}
}

// Offsets in a secure conversation message (Part 6, 6.7.2): the message
// header, the secure channel id, then for OPN the asymmetric security
// header and for MSG and CLO the token id; the sequence header starts what
// is secured.
const (
	channelIDAt  = uacpHeaderLen
	tokenIDAt    = uacpHeaderLen + 4
	symHeaderLen = uacpHeaderLen + 8
	seqHeaderLen = 8
)

// asymmetricHeader is the security header of an OpenSecureChannel message.
type asymmetricHeader struct {
	policy     string
	cert       []byte
	thumbprint []byte
	end        int // where the sequence header starts
}

func parseAsymmetricHeader(msg []byte) (asymmetricHeader, error) {
	var h asymmetricHeader
	at := channelIDAt + 4
	if at+12 > len(msg) {
		return h, relayFailed(ua.StatusBadDecodingError, "OpenSecureChannel of %d bytes, too short for its security header", len(msg))
	}
	fields := make([][]byte, 3)
	for i := range fields {
		n := int(int32(binary.LittleEndian.Uint32(msg[at:])))
		at += 4
		if n < 0 {
			continue
		}
		if n > len(msg)-at {
			return h, relayFailed(ua.StatusBadDecodingError, "OpenSecureChannel security header field of %d bytes in a message of %d", n, len(msg))
		}
		fields[i] = msg[at : at+n]
		at += n
		if i < 2 && at+4 > len(msg) {
			return h, relayFailed(ua.StatusBadDecodingError, "OpenSecureChannel security header cut short")
		}
	}
	h.policy, h.cert, h.thumbprint, h.end = string(fields[0]), fields[1], fields[2], at
	return h, nil
}

// appendByteString appends b as an OPC UA ByteString (null when nil).
func appendByteString(dst, b []byte) []byte {
	if b == nil {
		return binary.LittleEndian.AppendUint32(dst, 0xFFFFFFFF)
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

// openHeader writes an OpenSecureChannel message's headers (its size is
// set when it is sealed).
func openHeader(chunk byte, channelID uint32, policy string, cert, thumbprint []byte) []byte {
	b := append([]byte("OPN"), chunk, 0, 0, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, channelID)
	b = appendByteString(b, []byte(policy))
	b = appendByteString(b, cert)
	return appendByteString(b, thumbprint)
}

// unseal checks and, if encrypted, decrypts what follows header in msg
// with algo, and returns it without padding and signature: the sequence
// header and the body. secured: signed (and checked); encrypted: also
// encrypted.
func unseal(algo *uapolicy.EncryptionAlgorithm, secured, encrypted bool, msg []byte, header int) ([]byte, error) {
	if !secured {
		return msg[header:], nil
	}
	plain := make([]byte, header, len(msg))
	copy(plain, msg[:header])
	if encrypted {
		p, err := algo.Decrypt(msg[header:])
		if err != nil {
			return nil, relayFailed(ua.StatusBadSecurityChecksFailed, "decrypt a message: %v", err)
		}
		plain = append(plain, p...)
	} else {
		plain = append(plain, msg[header:]...)
	}
	sig := algo.RemoteSignatureLength()
	if len(plain) < header+seqHeaderLen+sig {
		return nil, relayFailed(ua.StatusBadSecurityChecksFailed, "a secured message of %d bytes, too short for its signature", len(msg))
	}
	signed := plain[:len(plain)-sig]
	if err := algo.VerifySignature(signed, plain[len(plain)-sig:]); err != nil {
		return nil, relayFailed(ua.StatusBadSecurityChecksFailed, "a message whose signature does not verify")
	}
	if !encrypted {
		return signed[header:], nil
	}
	// Padding (Part 6, 6.7.2.5): PaddingSize bytes of its value, the
	// PaddingSize byte, and an ExtraPaddingSize byte when the decrypting
	// key is longer than 2048 bits.
	pad := int(signed[len(signed)-1]) + 1
	if algo.SignatureLength() > 256 {
		pad = (int(signed[len(signed)-1])<<8 | int(signed[len(signed)-2])) + 2
	}
	if pad > len(signed)-header-seqHeaderLen {
		return nil, relayFailed(ua.StatusBadSecurityChecksFailed, "padding of %d bytes in a message of %d", pad, len(msg))
	}
	return signed[header : len(signed)-pad], nil
}

// seal pads, signs and, if encrypted, encrypts plain (the sequence header
// and the body) after header with algo, and sets the message size.
func seal(algo *uapolicy.EncryptionAlgorithm, secured, encrypted bool, header, plain []byte) ([]byte, error) {
	b := append(header, plain...)
	if !secured {
		binary.LittleEndian.PutUint32(b[4:8], uint32(len(b)))
		return b, nil
	}
	sig := algo.SignatureLength()
	size := len(b) + sig
	if encrypted {
		block := algo.PlaintextBlockSize()
		extra := algo.RemoteSignatureLength() > 256 // the receiver's key is over 2048 bits
		sizeBytes := 1
		if extra {
			sizeBytes = 2
		}
		pad := 0
		if rem := (len(plain) + sig + sizeBytes) % block; rem != 0 {
			pad = block - rem
		}
		for range pad + 1 {
			b = append(b, byte(pad))
		}
		if extra {
			b = append(b, byte(pad>>8))
		}
		size = len(header) + (len(b)-len(header)+sig)/block*algo.BlockSize()
	}
	binary.LittleEndian.PutUint32(b[4:8], uint32(size))
	signature, err := algo.Signature(b)
	if err != nil {
		return nil, fmt.Errorf("sign a message: %w", err)
	}
	b = append(b, signature...)
	if !encrypted {
		return b, nil
	}
	c, err := algo.Encrypt(b[len(header):])
	if err != nil {
		return nil, fmt.Errorf("encrypt a message: %w", err)
	}
	return append(b[:len(header)], c...), nil
}

// secured says whether the channel's symmetric messages are signed and
// encrypted.
func (r *channelRelay) symmetric() (secured, encrypted bool) {
	return r.mode != ua.MessageSecurityModeNone && r.mode != ua.MessageSecurityModeInvalid,
		r.mode == ua.MessageSecurityModeSignAndEncrypt
}

// fromClient re-secures one message from the client for the library and
// returns it with its body in clear (after the sequence header; for an
// OpenSecureChannel the request, for MSG and CLO this chunk's part of the
// request).
func (r *channelRelay) fromClient(msg []byte) (out, body []byte, err error) {
	switch string(msg[:3]) {
	case "OPN":
		return r.openFromClient(msg)
	case "MSG", "CLO":
		if err := r.awaitOpen(); err != nil {
			return nil, nil, err
		}
		return r.messageFromClient(msg)
	}
	return nil, nil, relayFailed(ua.StatusBadTCPMessageTypeInvalid, "client message of type %q on an open connection", msg[:3])
}

func (r *channelRelay) openFromClient(msg []byte) ([]byte, []byte, error) {
	if msg[3] != 'F' {
		return nil, nil, relayFailed(ua.StatusBadTCPMessageTypeInvalid, "an OpenSecureChannel in chunks")
	}
	h, err := parseAsymmetricHeader(msg)
	if err != nil {
		return nil, nil, err
	}
	if err := r.awaitOpen(); err != nil { // one OpenSecureChannel at a time
		return nil, nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.learnSecurity(h); err != nil {
		return nil, nil, err
	}
	secured := h.policy != ua.SecurityPolicyURINone
	plain, err := unseal(r.fromClientAsym(), secured, secured, msg, h.end)
	if err != nil {
		return nil, nil, err
	}
	body := plain[seqHeaderLen:]
	req, err := decodeOpenRequest(body)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case len(r.tokens) == 0 && req.RequestType != ua.SecurityTokenRequestTypeIssue:
		return nil, nil, relayFailed(ua.StatusBadSecureChannelIDInvalid, "an OpenSecureChannel Renew before the channel was issued")
	case len(r.tokens) > 0 && req.RequestType != ua.SecurityTokenRequestTypeRenew:
		return nil, nil, relayFailed(ua.StatusBadRequestTypeInvalid, "an OpenSecureChannel Issue on a channel already open")
	case len(r.tokens) > 0 && req.SecurityMode != r.mode:
		return nil, nil, relayFailed(ua.StatusBadSecurityModeRejected, "a renewal changes the security mode from %v to %v", r.mode, req.SecurityMode)
	case !secured && req.SecurityMode != ua.MessageSecurityModeNone:
		return nil, nil, relayFailed(ua.StatusBadSecurityModeRejected, "security mode %v without a security policy", req.SecurityMode)
	case secured && req.SecurityMode != ua.MessageSecurityModeSign && req.SecurityMode != ua.MessageSecurityModeSignAndEncrypt:
		return nil, nil, relayFailed(ua.StatusBadSecurityModeRejected, "security mode %v with security policy %s", req.SecurityMode, h.policy)
	}
	r.mode = req.SecurityMode
	r.nonce = append([]byte(nil), req.ClientNonce...)
	r.opening = make(chan struct{})
	var sender, thumbprint []byte
	if secured {
		sender, thumbprint = r.cert, uapolicy.Thumbprint(r.cert)
	}
	hdr := openHeader('F', binary.LittleEndian.Uint32(msg[channelIDAt:]), h.policy, sender, thumbprint)
	out, err := seal(r.toLibrary, secured, secured, hdr, plain)
	if err != nil {
		return nil, nil, err
	}
	return out, body, nil
}

// learnSecurity takes the policy and certificate of the channel's first
// OpenSecureChannel; a renewal must keep both.
func (r *channelRelay) learnSecurity(h asymmetricHeader) error {
	if r.policy != "" {
		if h.policy != r.policy || string(h.cert) != string(r.clientCert) {
			return relayFailed(ua.StatusBadSecurityChecksFailed, "a renewal changes the channel's security policy or certificate")
		}
		return nil
	}
	if h.policy == "" {
		return relayFailed(ua.StatusBadSecurityPolicyRejected, "an OpenSecureChannel without a security policy")
	}
	if h.policy != ua.SecurityPolicyURINone {
		if r.key == nil {
			return relayFailed(ua.StatusBadSecurityPolicyRejected, "security policy %s on a server without a key", h.policy)
		}
		if len(h.thumbprint) > 0 && string(h.thumbprint) != string(uapolicy.Thumbprint(r.cert)) {
			return relayFailed(ua.StatusBadCertificateInvalid, "an OpenSecureChannel for another server's certificate")
		}
		pub, err := uapolicy.PublicKey(h.cert)
		if err != nil {
			return relayFailed(ua.StatusBadCertificateInvalid, "the client certificate of an OpenSecureChannel: %v", err)
		}
		toClient, err := uapolicy.Asymmetric(h.policy, r.key, pub)
		if err != nil {
			return relayFailed(ua.StatusBadSecurityPolicyRejected, "security policy %s with the client's key: %v", h.policy, err)
		}
		toLibrary, err := uapolicy.Asymmetric(h.policy, r.key, &r.key.PublicKey)
		if err != nil {
			return relayFailed(ua.StatusBadSecurityPolicyRejected, "security policy %s with the server's key: %v", h.policy, err)
		}
		r.toClient, r.toLibrary = toClient, toLibrary
	}
	r.policy, r.clientCert = h.policy, append([]byte(nil), h.cert...)
	return nil
}

// fromClientAsym opens the client's OpenSecureChannel messages: the same
// keys as toClient, the other way round.
func (r *channelRelay) fromClientAsym() *uapolicy.EncryptionAlgorithm { return r.toClient }

func decodeOpenRequest(body []byte) (req *ua.OpenSecureChannelRequest, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = relayFailed(ua.StatusBadDecodingError, "an OpenSecureChannel request the decoder cannot take (%v)", p)
		}
	}()
	if err := checkEncodingLimits(body); err != nil {
		return nil, relayFailed(ua.StatusBadEncodingLimitsExceeded, "an OpenSecureChannel request over the decoder's limits: %v", err)
	}
	_, v, err := ua.DecodeService(body)
	if err != nil {
		return nil, relayFailed(ua.StatusBadDecodingError, "decode an OpenSecureChannel request: %v", err)
	}
	req, ok := v.(*ua.OpenSecureChannelRequest)
	if !ok {
		return nil, relayFailed(ua.StatusBadDecodingError, "an OpenSecureChannel message carrying %T", v)
	}
	return req, nil
}

// awaitOpen waits for the answer to the OpenSecureChannel in flight, if
// one is.
func (r *channelRelay) awaitOpen() error {
	r.mu.Lock()
	ch := r.opening
	r.mu.Unlock()
	if ch == nil {
		return nil
	}
	t := time.NewTimer(r.wait)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-r.closed:
		return relayFailed(ua.StatusBadConnectionClosed, "the connection closed during an OpenSecureChannel")
	case <-t.C:
		return relayFailed(ua.StatusBadTimeout, "the server did not answer an OpenSecureChannel within %v", r.wait)
	}
}

func (r *channelRelay) messageFromClient(msg []byte) ([]byte, []byte, error) {
	if len(msg) < symHeaderLen {
		return nil, nil, relayFailed(ua.StatusBadDecodingError, "a message of %d bytes, too short for its headers", len(msg))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.tokens) == 0 {
		return nil, nil, relayFailed(ua.StatusBadSecureChannelIDInvalid, "a message before the secure channel was opened")
	}
	id := binary.LittleEndian.Uint32(msg[tokenIDAt:])
	var tok *relayToken
	for _, t := range r.tokens {
		if t.clientID == id {
			tok = t
		}
	}
	if tok == nil {
		return nil, nil, relayFailed(ua.StatusBadSecureChannelTokenUnknown, "a message secured with token %d, which this channel does not know", id)
	}
	current := r.tokens[len(r.tokens)-1]
	if tok == current {
		r.sendWith = current // the client uses the new token: so may the server
	}
	secured, encrypted := r.symmetric()
	plain, err := unseal(tok.server, secured, encrypted, msg, symHeaderLen)
	if err != nil {
		return nil, nil, err
	}
	hdr := append([]byte(nil), msg[:symHeaderLen]...)
	binary.LittleEndian.PutUint32(hdr[tokenIDAt:], current.libraryID)
	out, err := seal(current.client, secured, encrypted, hdr, plain)
	if err != nil {
		return nil, nil, err
	}
	return out, plain[seqHeaderLen:], nil
}

// fromLibrary re-secures one message from the library for the client.
func (r *channelRelay) fromLibrary(msg []byte) ([]byte, error) {
	switch string(msg[:3]) {
	case "OPN":
		return r.openFromLibrary(msg)
	case "MSG", "CLO":
		return r.messageFromLibrary(msg)
	case "ERR":
		return msg, nil
	}
	return nil, relayFailed(ua.StatusBadTCPMessageTypeInvalid, "server message of type %q", msg[:3])
}

func (r *channelRelay) openFromLibrary(msg []byte) ([]byte, error) {
	h, err := parseAsymmetricHeader(msg)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.opening == nil {
		return nil, relayFailed(ua.StatusBadUnexpectedError, "an OpenSecureChannel answer nobody asked for")
	}
	secured := r.policy != ua.SecurityPolicyURINone
	plain, err := unseal(r.toLibrary, secured, secured, msg, h.end)
	if err != nil {
		return nil, err
	}
	resp, err := decodeOpenResponse(plain[seqHeaderLen:])
	if err != nil {
		return nil, err
	}
	if resp.ResponseHeader != nil && resp.ResponseHeader.ServiceResult == ua.StatusOK && resp.SecurityToken != nil {
		if err := r.addToken(resp); err != nil {
			return nil, err
		}
		body, err := encodeResponse(resp, id.OpenSecureChannelResponse_Encoding_DefaultBinary)
		if err != nil {
			return nil, err
		}
		plain = append(plain[:seqHeaderLen:seqHeaderLen], body...)
	}
	close(r.opening)
	r.opening, r.nonce = nil, nil
	var sender, thumbprint []byte
	if secured {
		sender, thumbprint = r.cert, uapolicy.Thumbprint(r.clientCert)
	}
	hdr := openHeader(msg[3], binary.LittleEndian.Uint32(msg[channelIDAt:]), r.policy, sender, thumbprint)
	return seal(r.toClient, secured, secured, hdr, plain)
}

// addToken records the token the library's answer issues and gives it the
// client's TokenId: the library's for the first, one more than the last
// for each renewal.
func (r *channelRelay) addToken(resp *ua.OpenSecureChannelResponse) error {
	server, err := uapolicy.Symmetric(r.policy, resp.ServerNonce, r.nonce)
	if err != nil {
		return relayFailed(ua.StatusBadSecurityChecksFailed, "derive the server's keys: %v", err)
	}
	client, err := uapolicy.Symmetric(r.policy, r.nonce, resp.ServerNonce)
	if err != nil {
		return relayFailed(ua.StatusBadSecurityChecksFailed, "derive the client's keys: %v", err)
	}
	tok := &relayToken{libraryID: resp.SecurityToken.TokenID, clientID: resp.SecurityToken.TokenID, server: server, client: client}
	if n := len(r.tokens); n > 0 {
		tok.clientID = r.tokens[n-1].clientID + 1
		if tok.clientID == 0 {
			tok.clientID = 1
		}
	}
	r.tokens = append(r.tokens, tok)
	if len(r.tokens) > maxRelayTokens {
		r.tokens = r.tokens[len(r.tokens)-maxRelayTokens:]
	}
	if r.sendWith == nil || !containsToken(r.tokens, r.sendWith) {
		r.sendWith = r.tokens[0]
	}
	resp.SecurityToken.TokenID = tok.clientID
	return nil
}

func containsToken(ts []*relayToken, t *relayToken) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

func decodeOpenResponse(body []byte) (resp *ua.OpenSecureChannelResponse, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = relayFailed(ua.StatusBadDecodingError, "an OpenSecureChannel answer the decoder cannot take (%v)", p)
		}
	}()
	_, v, err := ua.DecodeService(body)
	if err != nil {
		return nil, relayFailed(ua.StatusBadDecodingError, "decode the server's OpenSecureChannel answer: %v", err)
	}
	resp, ok := v.(*ua.OpenSecureChannelResponse)
	if !ok {
		return nil, relayFailed(ua.StatusBadDecodingError, "an OpenSecureChannel answer carrying %T", v)
	}
	return resp, nil
}

// encodeResponse encodes v with its binary encoding's type id first, as a
// message body carries it.
func encodeResponse(v any, typeID uint16) ([]byte, error) {
	tid, err := ua.NewFourByteExpandedNodeID(0, typeID).Encode()
	if err != nil {
		return nil, fmt.Errorf("encode a type id: %w", err)
	}
	b, err := ua.Encode(v)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return append(tid, b...), nil
}

func (r *channelRelay) messageFromLibrary(msg []byte) ([]byte, error) {
	if len(msg) < symHeaderLen {
		return nil, relayFailed(ua.StatusBadDecodingError, "a server message of %d bytes", len(msg))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.tokens) == 0 {
		return nil, relayFailed(ua.StatusBadSecureChannelIDInvalid, "a server message before the channel was opened")
	}
	secured, encrypted := r.symmetric()
	// The library's newest keys first; the token before, for what it
	// sent before its answer to a renewal. And while it handles a
	// renewal, the library secures what it sends meanwhile with the
	// OpenSecureChannel's asymmetric keys (it keeps one set of keys per
	// channel and swaps them in place).
	var plain []byte
	err := errors.New("no keys")
	for i := len(r.tokens) - 1; i >= 0 && err != nil; i-- {
		plain, err = unseal(r.tokens[i].client, secured, encrypted, msg, symHeaderLen)
	}
	if err != nil && secured {
		plain, err = unseal(r.toLibrary, secured, encrypted, msg, symHeaderLen)
	}
	if err != nil {
		return nil, err
	}
	hdr := append([]byte(nil), msg[:symHeaderLen]...)
	binary.LittleEndian.PutUint32(hdr[tokenIDAt:], r.sendWith.clientID)
	return seal(r.sendWith.server, secured, encrypted, hdr, plain)
}
