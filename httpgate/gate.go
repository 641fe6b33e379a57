package httpgate

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/scadad/scadad/pki"
)

// Token is a bearer token as the replicated state knows it.
type Token struct {
	Name    string
	Targets []string  // none: any target
	Expires time.Time // zero: never
}

// TokenLookup finds a bearer token by the SHA-256 of what the request
// carries after "Bearer "; it must be cheap, every enqueue asks it.
type TokenLookup func(hash [32]byte) (Token, bool)

// Gate checks requests on the HTTP listener.
type Gate struct {
	// Insecure lets every request through: a plain-HTTP lab listener has
	// no certificate to check.
	Insecure bool
	// MetricsOpen serves /metrics to anyone.
	MetricsOpen bool
	// Tokens looks bearer tokens up (nil: none are accepted).
	Tokens TokenLookup
	// Revoked says whether a client certificate is on the deny list (nil:
	// none is). The handshake refuses a revoked certificate and its open
	// connections are closed when the revocation applies; this catches a
	// request already read from such a connection in between.
	Revoked func(*x509.Certificate) bool
	Now     func() time.Time
}

var bearerPrefix = []byte("bearer ")

// bearer returns the token a request carries, or nil.
func bearer(ctx *fasthttp.RequestCtx) []byte {
	h := ctx.Request.Header.Peek("Authorization")
	if len(h) <= len(bearerPrefix) || !bytes.EqualFold(h[:len(bearerPrefix)], bearerPrefix) {
		return nil
	}
	return bytes.TrimSpace(h[len(bearerPrefix):])
}

// token checks a bearer token; a refusal is written and ok is false.
func (g *Gate) token(ctx *fasthttp.RequestCtx, raw []byte, target string) bool {
	var t Token
	found := false
	if g.Tokens != nil {
		t, found = g.Tokens(sha256.Sum256(raw))
	}
	switch {
	case !found:
		refuse(ctx, fasthttp.StatusForbidden, refusal{Code: "forbidden", Error: "bearer token not known (revoked, or never created): scadactl tokens list shows the tokens there are"})
		return false
	case !t.Expires.IsZero() && !g.now().Before(t.Expires):
		refuse(ctx, fasthttp.StatusForbidden, refusal{Code: "forbidden", Error: fmt.Sprintf("bearer token %q expired %s", t.Name, t.Expires.UTC().Format(time.RFC3339))})
		return false
	case target != "" && len(t.Targets) > 0 && !slices.Contains(t.Targets, target):
		refuse(ctx, fasthttp.StatusForbidden, refusal{Code: "forbidden", Target: target,
			Error: fmt.Sprintf("bearer token %q may enqueue to %s only, not to %q", t.Name, strings.Join(t.Targets, ", "), target)})
		return false
	}
	return true
}

func (g *Gate) now() time.Time {
	if g.Now == nil {
		return time.Now()
	}
	return g.Now()
}

// refusal is the JSON body of a 401 or 403.
type refusal struct {
	Error   string `json:"error"`
	Code    string `json:"code"`
	Missing string `json:"missing,omitempty"`
	Target  string `json:"target,omitempty"`
}

// Enqueue reports whether the request may enqueue to target; when not, it
// has written the refusal.
func (g *Gate) Enqueue(ctx *fasthttp.RequestCtx, target string) bool {
	if g.Insecure {
		return true
	}
	cert := peerCert(ctx)
	if cert == nil {
		if raw := bearer(ctx); raw != nil {
			return g.token(ctx, raw, target)
		}
		refuse(ctx, fasthttp.StatusUnauthorized, refusal{
			Code: "unauthenticated", Missing: "client certificate or bearer token",
			Error: "no credentials: enqueue needs a bearer token (Authorization: Bearer …, from scadactl tokens create --name N --targets " + target + ") or a client certificate from the site CA with role producer",
		})
		return false
	}
	if g.revoked(ctx, cert) {
		return false
	}
	if pki.IsNodeCert(cert) {
		// A node's certificate carries no role: it is for Raft and the
		// control API, and nothing of scadad enqueues with it.
		refuse(ctx, fasthttp.StatusForbidden, refusal{Code: "forbidden", Target: target,
			Error: fmt.Sprintf("certificate %q is a node's certificate (serverAuth), not a producer's: enqueue needs a client certificate with role producer (scadactl certs issue --client --role producer) or a bearer token (scadactl tokens create)", cert.Subject.CommonName)})
		return false
	}
	role, err := pki.ClientRole(cert)
	if err != nil {
		refuse(ctx, fasthttp.StatusForbidden, refusal{Code: "forbidden", Target: target, Error: err.Error()})
		return false
	}
	switch role {
	case pki.RoleProducer, pki.RoleOperator, pki.RoleAdmin:
	default:
		refuse(ctx, fasthttp.StatusForbidden, refusal{Code: "forbidden", Target: target,
			Error: fmt.Sprintf("certificate %q has role %s; enqueue needs producer, operator or admin", cert.Subject.CommonName, role)})
		return false
	}
	if !pki.CertAllowsTarget(cert, target) {
		refuse(ctx, fasthttp.StatusForbidden, refusal{Code: "forbidden", Target: target,
			Error: fmt.Sprintf("certificate %q may enqueue to %s only, not to %q", cert.Subject.CommonName, strings.Join(pki.CertTargets(cert), ", "), target)})
		return false
	}
	return true
}

// Metrics reports whether the request may read /metrics; when not, it has
// written the refusal.
func (g *Gate) Metrics(ctx *fasthttp.RequestCtx) bool {
	if g.Insecure || g.MetricsOpen {
		return true
	}
	if cert := peerCert(ctx); cert != nil {
		if g.revoked(ctx, cert) {
			return false
		}
		// A node's certificate may scrape; a client certificate needs a
		// role, whichever.
		if !pki.IsNodeCert(cert) {
			if _, err := pki.ClientRole(cert); err != nil {
				refuse(ctx, fasthttp.StatusForbidden, refusal{Code: "forbidden", Error: err.Error()})
				return false
			}
		}
		return true
	}
	if raw := bearer(ctx); raw != nil {
		return g.token(ctx, raw, "")
	}
	refuse(ctx, fasthttp.StatusUnauthorized, refusal{
		Code: "unauthenticated", Missing: "client certificate or bearer token",
		Error: "no credentials: /metrics needs a bearer token or a client certificate from the site CA (or http.metrics_open: true in the node config)",
	})
	return false
}

// revoked refuses a revoked certificate (and says so).
func (g *Gate) revoked(ctx *fasthttp.RequestCtx, cert *x509.Certificate) bool {
	if g.Revoked == nil || !g.Revoked(cert) {
		return false
	}
	refuse(ctx, fasthttp.StatusForbidden, refusal{Code: "forbidden",
		Error: fmt.Sprintf("certificate %q (serial %s) is revoked", cert.Subject.CommonName, pki.SerialHex(cert))})
	return true
}

// peerCert is the request's verified client certificate, or nil.
func peerCert(ctx *fasthttp.RequestCtx) *x509.Certificate {
	cs := ctx.TLSConnectionState()
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return nil
	}
	return cs.PeerCertificates[0]
}

func refuse(ctx *fasthttp.RequestCtx, status int, body refusal) {
	b, _ := json.Marshal(body) // a struct of strings always encodes
	ctx.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.SetBody(append(b, '\n'))
}
