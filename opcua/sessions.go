package opcua

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uapolicy"

	"github.com/scadad/scadad/internal/passhash"
)

// maxPendingSessions bounds sessions created but never activated; the
// library never expires sessions, so a client looping CreateSession would
// otherwise grow this table without limit.
const maxPendingSessions = 4096

// sessionTable tracks the sessions: which are activated, with which
// identity, and when each was last used. The library serves reads, writes
// and browses to any authentication token, activated or not, never checks
// the identity token, and never expires a session; this table does all
// three (a token it does not hold is refused by guard).
type sessionTable struct {
	// dropped is told (outside mu) the key of every session the table
	// forgets, so what the session owned can go with it.
	dropped func(key string)
	now     func() time.Time

	mu       sync.Mutex
	sessions map[string]*session // by authentication token
	active   int                 // how many are activated
}

// session is one client session.
type session struct {
	nonce     []byte // the last server nonce, for the next ActivateSession
	activated bool
	who       identity
	timeout   time.Duration // the revised session timeout
	used      time.Time     // the last request that named it
}

// identity is who a session was activated as.
type identity struct {
	name     string // "anonymous" or the user name
	canWrite bool   // its writes may go on to the role gate
}

func newSessionTable(dropped func(key string), now func() time.Time) *sessionTable {
	return &sessionTable{dropped: dropped, now: now, sessions: make(map[string]*session)}
}

func tokenKey(t *ua.NodeID) string {
	if t == nil {
		return ""
	}
	return t.String()
}

// created records a new session, not yet activated, that expires after
// timeout without a request.
func (t *sessionTable) created(token *ua.NodeID, nonce []byte, timeout time.Duration) {
	var evicted []string
	t.mu.Lock()
	if len(t.sessions)-t.active >= maxPendingSessions {
		for k, e := range t.sessions {
			if !e.activated {
				delete(t.sessions, k)
				evicted = append(evicted, k)
			}
		}
	}
	t.sessions[tokenKey(token)] = &session{nonce: nonce, timeout: timeout, used: t.now()}
	t.mu.Unlock()
	for _, k := range evicted {
		t.dropped(k)
	}
}

func (t *sessionTable) nonce(token *ua.NodeID) ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.sessions[tokenKey(token)]
	if !ok {
		return nil, false
	}
	return e.nonce, true
}

// full reports whether max sessions (0: no cap) are activated already.
func (t *sessionTable) full(max int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.fullLocked(max)
}

func (t *sessionTable) fullLocked(max int) bool { return max > 0 && t.active >= max }

// activate marks a session activated as who, keeping the server nonce
// its ActivateSession answer carried for the next one, unless it is a
// first activation and max sessions (0: no cap) are activated already.
func (t *sessionTable) activate(token *ua.NodeID, who identity, nonce []byte, max int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.sessions[tokenKey(token)]
	if !ok {
		return false
	}
	if !e.activated {
		if t.fullLocked(max) {
			return false
		}
		t.active++
	}
	e.activated, e.who, e.nonce, e.used = true, who, nonce, t.now()
	return true
}

// identity returns who an activated session is, and counts the request
// as the session's use.
func (t *sessionTable) identity(token *ua.NodeID) (identity, bool) {
	if token == nil {
		return identity{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.sessions[tokenKey(token)]
	if !ok || !e.activated {
		return identity{}, false
	}
	e.used = t.now()
	return e.who, true
}

// closed forgets a session. Its subscriptions go too, whatever the
// CloseSession request's DeleteSubscriptions says: without
// TransferSubscriptions no other session could ever use them.
func (t *sessionTable) closed(token *ua.NodeID) {
	k := tokenKey(token)
	t.mu.Lock()
	t.removeLocked(k)
	t.mu.Unlock()
	t.dropped(k)
}

func (t *sessionTable) removeLocked(k string) {
	if e, ok := t.sessions[k]; ok {
		if e.activated {
			t.active--
		}
		delete(t.sessions, k)
	}
}

// expire forgets the sessions no request has named for their timeout (a
// client that vanished; Part 4, 5.6.2), with their subscriptions, and
// returns how many. A session for which waiting reports Publish requests
// held by the server is in use: a subscription with a long keep-alive
// answers them rarely, and its client has nothing else to send meanwhile.
func (t *sessionTable) expire(waiting func(key string) bool) int {
	now := t.now()
	idle := func(e *session) bool { return now.Sub(e.used) > e.timeout }
	var candidates []string
	t.mu.Lock()
	for k, e := range t.sessions {
		if idle(e) {
			candidates = append(candidates, k)
		}
	}
	t.mu.Unlock()
	var gone []string
	for _, k := range candidates {
		if !waiting(k) {
			gone = append(gone, k)
		}
	}
	t.mu.Lock()
	kept := gone[:0]
	for _, k := range gone {
		if e, ok := t.sessions[k]; ok && idle(e) { // not used meanwhile
			t.removeLocked(k)
			kept = append(kept, k)
		}
	}
	t.mu.Unlock()
	for _, k := range kept {
		t.dropped(k)
	}
	return len(kept)
}

// count is how many sessions are activated.
func (t *sessionTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.active
}

// dropAll forgets every session, with its subscriptions: the library's
// server that held them was replaced (Server.restartLibrary).
func (t *sessionTable) dropAll() {
	t.mu.Lock()
	keys := make([]string, 0, len(t.sessions))
	for k := range t.sessions {
		keys = append(keys, k)
	}
	clear(t.sessions)
	t.active = 0
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
		return identity{name: "anonymous", canWrite: s.cfg.AnonymousCanWrite}, ua.StatusOK
	case *ua.UserNameIdentityToken:
		if len(s.cfg.Users) == 0 && s.cfg.UserStore == nil {
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
		if u, ok := s.matchStoredUser(t.UserName, pass); ok {
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

// matchStoredUser checks name and password against the replicated users.
// One verification runs at a time (each takes tens of megabytes for tens
// of milliseconds: a burst of logins must not take the node's memory),
// and an unknown name costs a verification too, so the time taken does
// not tell a guesser which names exist.
func (s *Server) matchStoredUser(name string, password []byte) (StoredUser, bool) {
	if s.cfg.UserStore == nil {
		return StoredUser{}, false
	}
	u, found := s.cfg.UserStore.User(name)
	hash := u.Hash
	if !found {
		hash = s.decoyHash()
	}
	s.verifyMu.Lock()
	ok, err := passhash.Verify(hash, password)
	s.verifyMu.Unlock()
	if err != nil {
		s.log.Warn().Err(err).Str("user", name).Msg("opcua user's stored password hash cannot be checked; set the password again with scadactl opcua users set")
		return StoredUser{}, false
	}
	return u, found && ok
}

// decoyHash is a hash of a random password, made at the first unknown
// name: verifying against it costs what a real user's check costs.
func (s *Server) decoyHash() string {
	s.decoyOnce.Do(func() {
		var pw [32]byte
		_, _ = rand.Read(pw[:])
		s.decoy, _ = passhash.Hash(pw[:], rand.Reader)
	})
	return s.decoy
}
