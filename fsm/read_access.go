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
