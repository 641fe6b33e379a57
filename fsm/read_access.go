package fsm

import (
	"sort"
	"time"

	"github.com/scadad/scadad/fsm/fsmpb"
)

// RevokedCert is one entry of the certificate deny list.
type RevokedCert struct {
	Serial, Name, Reason, Actor string
	At                          time.Time
	LogIndex                    uint64
}

func revokedFromRecord(r *fsmpb.RevokedCert) RevokedCert {
	return RevokedCert{Serial: r.Serial, Name: r.Name, Reason: r.Reason, Actor: r.Actor, At: time.Unix(0, r.StampUnixNano).UTC(), LogIndex: r.LogIndex}
}

// Token is a producer's bearer token, known by its SHA-256 only.
type Token struct {
	Name    string
	Targets []string  // none: any target
	Expires time.Time // zero: never
	Actor   string
	Created time.Time
}

func tokenFromRecord(r *fsmpb.TokenRecord) Token {
	t := Token{Name: r.Name, Targets: r.Targets, Actor: r.Actor, Created: time.Unix(0, r.StampUnixNano).UTC()}
	if r.ExpiresUnixNano != 0 {
		t.Expires = time.Unix(0, r.ExpiresUnixNano).UTC()
	}
	return t
}

// Access is the site's access control as of an applied index. It is never
// changed once published: readers may hold it without locks.
type Access struct {
	// Revoked maps a serial (pki.SerialHex) to its revocation.
	Revoked map[string]RevokedCert
	// Tokens maps a bearer token's SHA-256 to the token.
	Tokens map[[32]byte]Token
	// OPCUATrusted and OPCUARejected map a certificate's thumbprint to
	// the OPC UA trust store's entry; OPCUAUsers maps a user name to its
	// identity.
	OPCUATrusted  map[string]OPCUATrustedCert
	OPCUARejected map[string]OPCUARejectedCert
	OPCUAUsers    map[string]OPCUAUser
}

// Token looks a bearer token up by its SHA-256.
func (a *Access) Token(hash [32]byte) (Token, bool) {
	t, ok := a.Tokens[hash]
	return t, ok
}

// TokenList is every token, by name.
func (a *Access) TokenList() []Token {
	out := make([]Token, 0, len(a.Tokens))
	for _, t := range a.Tokens {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// IsRevoked reports whether the certificate serial is on the deny list.
func (a *Access) IsRevoked(serial string) bool {
	_, ok := a.Revoked[serial]
	return ok
}

// RevokedList is the deny list, oldest revocation first.
func (a *Access) RevokedList() []RevokedCert {
	out := make([]RevokedCert, 0, len(a.Revoked))
	for _, r := range a.Revoked {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LogIndex < out[j].LogIndex })
	return out
}

// Access returns the access control as of the last applied entry: the
// handshakes of every listener read it, so it is kept in memory and
// replaced whole when an entry changes it.
func (f *FSM) Access() *Access {
	if a := f.access.Load(); a != nil {
		return a
	}
	return &Access{}
}

// OPCUATrustedCert is a client certificate (or issuing CA) every node's
// OPC UA server trusts.
type OPCUATrustedCert struct {
	Thumbprint string
	DER        []byte
	Name       string
	Actor      string
	At         time.Time
	LogIndex   uint64
}

// OPCUARejectedCert is a client certificate an OPC UA server refused,
// kept for an operator to review.
type OPCUARejectedCert struct {
	Thumbprint     string
	DER            []byte
	NodeID         string   // the node that refused it last
	Nodes          []string // every node that refused it
	ApplicationURI string
	Subject        string
	Reason         string
	First, Last    time.Time
	Count          uint64
	LogIndex       uint64
}

// OPCUAUser is an OPC UA user-name identity: the password's hash only.
type OPCUAUser struct {
	Name     string
	Hash     string // passhash's PHC string
	CanWrite bool
	Actor    string
	At       time.Time
}

// OPCUATrustedList is the trusted certificates, oldest first.
func (a *Access) OPCUATrustedList() []OPCUATrustedCert {
	out := make([]OPCUATrustedCert, 0, len(a.OPCUATrusted))
	for _, c := range a.OPCUATrusted {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LogIndex < out[j].LogIndex })
	return out
}

// OPCUARejectedList is the rejected certificates, first refused first.
func (a *Access) OPCUARejectedList() []OPCUARejectedCert {
	out := make([]OPCUARejectedCert, 0, len(a.OPCUARejected))
	for _, c := range a.OPCUARejected {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LogIndex < out[j].LogIndex })
	return out
}

// OPCUAUserList is the user-name identities, by name.
func (a *Access) OPCUAUserList() []OPCUAUser {
	out := make([]OPCUAUser, 0, len(a.OPCUAUsers))
	for _, u := range a.OPCUAUsers {
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
