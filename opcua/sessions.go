package opcua

import (
	"bytes"
	"crypto/rsa"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uapolicy"
)

// maxPendingSessions bounds sessions created but never activated; the
// library never expires sessions, so a client looping CreateSession would
// otherwise grow this table without limit.
const maxPendingSessions = 4096

// sessionTable tracks which sessions are activated and with which identity.
// The library serves reads, writes and browses to any authentication token,
// activated or not, and never checks the identity token at all.
type sessionTable struct {
	// dropped is told (outside mu) the key of every session the table
	// forgets, so what the session owned can go with it.
	dropped func(key string)

	mu     sync.Mutex
	nonces map[string][]byte   // auth token -> last server nonce
	active map[string]identity // auth token -> who activated it
}

// identity is who a session was activated as.
type identity struct {
	name     string // "anonymous" or the user name
	anon     bool
	canWrite bool // its writes may go on to the role gate
}

func newSessionTable(dropped func(key string)) *sessionTable {
	return &sessionTable{dropped: dropped, nonces: make(map[string][]byte), active: make(map[string]identity)}
}

func tokenKey(t *ua.NodeID) string {
	if t == nil {
		return ""
	}
	return t.String()
}

func (t *sessionTable) created(token *ua.NodeID, nonce []byte) {
	var evicted []string
	t.mu.Lock()
	if len(t.nonces) >= maxPendingSessions {
		for k := range t.nonces {
			if _, ok := t.active[k]; !ok {
				delete(t.nonces, k)
				evicted = append(evicted, k)
			}
		}
	}
	t.nonces[tokenKey(token)] = nonce
	t.mu.Unlock()
	for _, k := range evicted {
		t.dropped(k)
	}
}

func (t *sessionTable) nonce(token *ua.NodeID) ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.nonces[tokenKey(token)]
	return n, ok
}

func (t *sessionTable) activated(token *ua.NodeID, who identity, nonce []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.active[tokenKey(token)] = who
	t.nonces[tokenKey(token)] = nonce
}

func (t *sessionTable) identity(token *ua.NodeID) (identity, bool) {
	if token == nil {
		return identity{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	id, ok := t.active[tokenKey(token)]
	return id, ok
}

// closed forgets a session. Its subscriptions go too, whatever the
// CloseSession request's DeleteSubscriptions says: without
// TransferSubscriptions no other session could ever use them.
func (t *sessionTable) closed(token *ua.NodeID) {
	t.mu.Lock()
	delete(t.active, tokenKey(token))
	delete(t.nonces, tokenKey(token))
	t.mu.Unlock()
	t.dropped(tokenKey(token))
}

// dropAll forgets every session, with its subscriptions: the library's
// server that held them was replaced (Server.restartLibrary).
func (t *sessionTable) dropAll() {
	t.mu.Lock()
	keys := make([]string, 0, len(t.nonces)+len(t.active))
	for k := range t.nonces {
		keys = append(keys, k)
	}
	for k := range t.active {
		if _, ok := t.nonces[k]; !ok {
			keys = append(keys, k)
		}
	}
	clear(t.nonces)
	clear(t.active)
	t.mu.Unlock()
	for _, k := range keys {
		t.dropped(k)
	}
}

// checkIdentity validates an ActivateSession identity token against the
// configuration and returns who the session is.
func (s *Server) checkIdentity(tok *ua.ExtensionObject, authToken *ua.NodeID) (identity, ua.StatusCode) {
	var value any
	if tok != nil {
		value = tok.Value
	}
	switch t := value.(type) {
	case nil, *ua.AnonymousIdentityToken:
		if !s.cfg.AllowAnonymous {
			return identity{}, ua.StatusBadIdentityTokenRejected
		}
		return identity{name: "anonymous", anon: true, canWrite: s.cfg.AnonymousCanWrite}, ua.StatusOK
	case *ua.UserNameIdentityToken:
		if len(s.cfg.Users) == 0 {
			return identity{}, ua.StatusBadIdentityTokenRejected
		}
		pass, err := s.decryptPassword(t, authToken)
		if err != nil {
			s.log.Warn().Err(err).Str("user", t.UserName).Msg("opcua user token rejected")
			return identity{}, ua.StatusBadIdentityTokenInvalid
		}
		if u, ok := matchUser(s.cfg.Users, t.UserName, pass); ok {
			return identity{name: u.Name, canWrite: u.CanWrite}, ua.StatusOK
		}
		s.log.Warn().Str("user", t.UserName).Msg("opcua user name or password wrong")
		return identity{}, ua.StatusBadUserAccessDenied
	default:
		return identity{}, ua.StatusBadIdentityTokenInvalid
	}
}

// decryptPassword finds the token's security policy among the advertised
// user-token policies and decrypts the password with the server key.
func (s *Server) decryptPassword(t *ua.UserNameIdentityToken, authToken *ua.NodeID) ([]byte, error) {
	policy := ""
	for _, ep := range s.srv().Endpoints() {
		for _, p := range ep.UserIdentityTokens {
			if p != nil && p.PolicyID == t.PolicyID && p.TokenType == ua.UserTokenTypeUserName {
				policy = p.SecurityPolicyURI
			}
		}
	}
	key, _ := s.key.(*rsa.PrivateKey)
	nonce, ok := s.sessions.nonce(authToken)
	if !ok {
		return nil, fmt.Errorf("no server nonce for this session")
	}
	return decryptUserPassword(key, policy, t.Password, nonce)
}

// decryptUserPassword undoes the client's user-token encryption (Part 4,
// 7.36.3): with the policy's asymmetric algorithm and the server key, the
// plaintext is a little-endian length, the password, then the server nonce
// of the session being activated.
func decryptUserPassword(key *rsa.PrivateKey, policyURI string, secret, nonce []byte) ([]byte, error) {
	if policyURI == "" || policyURI == ua.SecurityPolicyURINone {
		return nil, fmt.Errorf("user token policy %q would carry the password in clear", policyURI)
	}
	if key == nil {
		return nil, fmt.Errorf("no server key")
	}
	enc, err := uapolicy.Asymmetric(policyURI, key, nil)
	if err != nil {
		return nil, fmt.Errorf("user token policy %s: %w", policyURI, err)
	}
	plain, err := enc.Decrypt(secret)
	if err != nil {
		return nil, fmt.Errorf("decrypt user token: %w", err)
	}
	if len(plain) < 4 {
		return nil, fmt.Errorf("user token too short")
	}
	n := int(binary.LittleEndian.Uint32(plain))
	if n != len(plain)-4 {
		return nil, fmt.Errorf("user token length %d does not match %d", n, len(plain)-4)
	}
	if len(nonce) == 0 || len(nonce) > n || !bytes.Equal(plain[4+n-len(nonce):], nonce) {
		return nil, fmt.Errorf("user token does not carry this session's nonce")
	}
	return plain[4 : 4+n-len(nonce)], nil
}

// matchUser finds the configured user with name and password, comparing
// in constant time.
func matchUser(users []User, name string, password []byte) (User, bool) {
	var found User
	ok := false
	for _, u := range users {
		nameOK := subtle.ConstantTimeCompare([]byte(u.Name), []byte(name)) == 1
		passOK := subtle.ConstantTimeCompare([]byte(u.Password), password) == 1
		if nameOK && passOK {
			found, ok = u, true
		}
	}
	return found, ok
}
