package httpgate

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/scadad/scadad/pki"
)

// tlsPipe is a connection whose TLS state is what the test says, as
// fasthttp sees a *tls.Conn after the handshake.
type tlsPipe struct {
	net.Conn
	state tls.ConnectionState
}

func (c tlsPipe) Handshake() error                     { return nil }
func (c tlsPipe) ConnectionState() tls.ConnectionState { return c.state }

// request builds a request context: over TLS with cert as the verified
// client certificate (nil: none presented), or plain when plain is set,
// carrying authorization when it is not empty.
func request(t *testing.T, cert *x509.Certificate, plain bool, authorization string) *fasthttp.RequestCtx {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	var conn net.Conn = a
	if !plain {
		st := tls.ConnectionState{HandshakeComplete: true, Version: tls.VersionTLS13}
		if cert != nil {
			st.PeerCertificates = []*x509.Certificate{cert}
			st.VerifiedChains = [][]*x509.Certificate{{cert}}
		}
		conn = tlsPipe{Conn: a, state: st}
	}
	ctx := &fasthttp.RequestCtx{}
	ctx.Init2(conn, nil, false)
	ctx.Request.Header.SetMethod("POST")
	if authorization != "" {
		ctx.Request.Header.Set("Authorization", authorization)
	}
	return ctx
}

type site struct {
	ca *pki.CA
}

func newSite(t *testing.T) site {
	t.Helper()
	ca, err := pki.GenerateCA("gate-test", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return site{ca: ca}
}

func (s site) client(t *testing.T, name string, role pki.Role, targets ...string) *x509.Certificate {
	t.Helper()
	leaf, err := s.ca.Issue(pki.LeafSpec{Name: name, Usage: pki.ClientUsage, Role: role, Targets: targets, NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return leaf.Cert
}

// answer is what the gate decided: let through, or the refusal it wrote.
type answer struct {
	ok     bool
	status int
	body   refusal
}

func decide(t *testing.T, ctx *fasthttp.RequestCtx, ok bool) answer {
	t.Helper()
	a := answer{ok: ok, status: ctx.Response.StatusCode()}
	if ok {
		if len(ctx.Response.Body()) != 0 {
			t.Errorf("let through with a body written: %s", ctx.Response.Body())
		}
		return a
	}
	if ct := string(ctx.Response.Header.ContentType()); ct != "application/json" {
		t.Errorf("refusal content type %q, want application/json", ct)
	}
	if err := json.Unmarshal(ctx.Response.Body(), &a.body); err != nil {
		t.Fatalf("refusal body %q is not JSON: %v", ctx.Response.Body(), err)
	}
	if a.body.Error == "" {
		t.Errorf("refusal %d names nothing wrong: %s", a.status, ctx.Response.Body())
	}
	return a
}

const (
	goodToken    = "scadad_good"
	expiredToken = "scadad_expired"
	limitedToken = "scadad_limited"
)

func testGate(now time.Time, revoked map[string]bool) *Gate {
	tokens := map[[32]byte]Token{
		sha256.Sum256([]byte(goodToken)):    {Name: "feed"},
		sha256.Sum256([]byte(expiredToken)): {Name: "old-feed", Expires: now.Add(-time.Second)},
		sha256.Sum256([]byte(limitedToken)): {Name: "hist-feed", Targets: []string{"historian"}, Expires: now.Add(time.Hour)},
	}
	return &Gate{
		Now: func() time.Time { return now },
		Tokens: func(h [32]byte) (Token, bool) {
			tok, ok := tokens[h]
			return tok, ok
		},
		Revoked: func(c *x509.Certificate) bool { return revoked[pki.SerialHex(c)] },
	}
}

// Every branch of the enqueue check: who is let through, and for everyone
// else the status and the JSON body that says why.
func TestEnqueueGate(t *testing.T) {
	s := newSite(t)
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	producer := s.client(t, "feed", pki.RoleProducer)
	limited := s.client(t, "hist-feed", pki.RoleProducer, "historian")
	viewer := s.client(t, "watcher", pki.RoleViewer)
	operator := s.client(t, "alice", pki.RoleOperator)
	admin := s.client(t, "root", pki.RoleAdmin)
	legacy := s.client(t, "old-operator", pki.RoleNone)
	nodeLeaf, err := s.ca.Issue(pki.LeafSpec{Name: "node-b", Usage: pki.NodeUsage, NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	node := nodeLeaf.Cert
	revokedProducer := s.client(t, "stolen-feed", pki.RoleProducer)
	revoked := map[string]bool{pki.SerialHex(revokedProducer): true}

	cases := []struct {
		name          string
		cert          *x509.Certificate
		authorization string
		target        string
		status        int // 0: let through
		code, missing string
		inError       string
	}{
		{name: "no credentials", target: "historian", status: 401, code: "unauthenticated", missing: "client certificate or bearer token", inError: "--targets historian"},
		{name: "authorization that is not a bearer token", authorization: "Basic dXNlcjpwYXNz", target: "historian", status: 401, code: "unauthenticated", missing: "client certificate or bearer token"},
		{name: "bearer with nothing after it", authorization: "Bearer ", target: "historian", status: 401, code: "unauthenticated", missing: "client certificate or bearer token"},
		{name: "producer certificate", cert: producer, target: "historian"},
		{name: "operator certificate", cert: operator, target: "historian"},
		{name: "admin certificate", cert: admin, target: "historian"},
		// v0.1.0 let one through as admin for that release only.
		{name: "certificate without a role", cert: legacy, target: "historian", status: 403, code: "forbidden", inError: `"old-operator" (serial ` + pki.SerialHex(legacy) + `) carries no role`},
		{name: "certificate without a role names the fix", cert: legacy, target: "historian", status: 403, code: "forbidden", inError: "scadactl certs issue --client --role"},
		// A node's certificate (serverAuth and clientAuth, no role) is for
		// Raft and the control API: no part of scadad enqueues over HTTP
		// with it, and it is no producer.
		{name: "node certificate", cert: node, target: "historian", status: 403, code: "forbidden", inError: `"node-b" is a node's certificate`},
		{name: "node certificate with a good token", cert: node, authorization: "Bearer " + goodToken, target: "historian", status: 403, code: "forbidden", inError: "node's certificate"},
		{name: "producer certificate limited to the target", cert: limited, target: "historian"},
		{name: "producer certificate limited to another target", cert: limited, target: "mes", status: 403, code: "forbidden", inError: `may enqueue to historian only, not to "mes"`},
		{name: "viewer certificate", cert: viewer, target: "historian", status: 403, code: "forbidden", inError: "role viewer"},
		{name: "revoked certificate", cert: revokedProducer, target: "historian", status: 403, code: "forbidden", inError: "revoked"},
		{name: "revoked certificate with a good token", cert: revokedProducer, authorization: "Bearer " + goodToken, target: "historian", status: 403, code: "forbidden", inError: "revoked"},
		{name: "good token", authorization: "Bearer " + goodToken, target: "historian"},
		{name: "good token, scheme in lower case", authorization: "bearer " + goodToken, target: "mes"},
		{name: "unknown or revoked token", authorization: "Bearer scadad_nope", target: "historian", status: 403, code: "forbidden", inError: "not known"},
		{name: "expired token", authorization: "Bearer " + expiredToken, target: "historian", status: 403, code: "forbidden", inError: `"old-feed" expired`},
		{name: "token limited to the target", authorization: "Bearer " + limitedToken, target: "historian"},
		{name: "token limited to another target", authorization: "Bearer " + limitedToken, target: "mes", status: 403, code: "forbidden", inError: `may enqueue to historian only, not to "mes"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := testGate(now, revoked)
			ctx := request(t, c.cert, false, c.authorization)
			got := decide(t, ctx, g.Enqueue(ctx, c.target))
			if c.status == 0 {
				if !got.ok {
					t.Fatalf("refused %d: %+v; want it let through", got.status, got.body)
				}
				return
			}
			if got.ok {
				t.Fatalf("let through; want %d", c.status)
			}
			if got.status != c.status || got.body.Code != c.code || got.body.Missing != c.missing {
				t.Errorf("refused %d %+v; want %d code %q missing %q", got.status, got.body, c.status, c.code, c.missing)
			}
			if !strings.Contains(got.body.Error, c.inError) {
				t.Errorf("error %q does not say %q", got.body.Error, c.inError)
			}
			if c.status == 403 && strings.Contains(c.name, "target") && got.body.Target != c.target {
				t.Errorf("refusal names target %q, want %q", got.body.Target, c.target)
			}
		})
	}
}

// Expiry is the instant itself: a token is good up to it and refused from
// it on, by the gate's clock.
func TestTokenExpiresAtItsInstant(t *testing.T) {
	expires := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		now time.Time
		ok  bool
	}{{expires.Add(-time.Nanosecond), true}, {expires, false}, {expires.Add(time.Hour), false}} {
		g := &Gate{Now: func() time.Time { return c.now }, Tokens: func([32]byte) (Token, bool) { return Token{Name: "t", Expires: expires}, true }}
		ctx := request(t, nil, false, "Bearer x")
		if got := decide(t, ctx, g.Enqueue(ctx, "historian")); got.ok != c.ok {
			t.Errorf("at %s: let through %v, want %v (%d %+v)", c.now, got.ok, c.ok, got.status, got.body)
		}
	}
}

// A gate without a token look-up accepts no token.
func TestNoTokenLookupAcceptsNoToken(t *testing.T) {
	g := &Gate{}
	ctx := request(t, nil, false, "Bearer "+goodToken)
	if got := decide(t, ctx, g.Enqueue(ctx, "historian")); got.ok || got.status != 403 {
		t.Errorf("got %+v, want 403", got)
	}
}

// http.insecure lets everything through, with no certificate to check.
func TestInsecureLetsEveryoneThrough(t *testing.T) {
	g := &Gate{Insecure: true}
	for _, auth := range []string{"", "Bearer scadad_nope"} {
		ctx := request(t, nil, true, auth)
		if got := decide(t, ctx, g.Enqueue(ctx, "historian")); !got.ok {
			t.Errorf("insecure enqueue with %q refused: %+v", auth, got)
		}
		ctx = request(t, nil, true, auth)
		if got := decide(t, ctx, g.Metrics(ctx)); !got.ok {
			t.Errorf("insecure metrics with %q refused: %+v", auth, got)
		}
	}
}

// A plain connection on a secure gate carries no certificate: it needs a
// token like any other.
func TestPlainConnectionOnSecureGateNeedsCredentials(t *testing.T) {
	g := testGate(time.Now(), nil)
	ctx := request(t, nil, true, "")
	if got := decide(t, ctx, g.Enqueue(ctx, "historian")); got.ok || got.status != 401 {
		t.Errorf("got %+v, want 401", got)
	}
}

// /metrics: any site certificate or a valid token, or anyone when open.
func TestMetricsGate(t *testing.T) {
	s := newSite(t)
	now := time.Now()
	viewer := s.client(t, "watcher", pki.RoleViewer)
	stolen := s.client(t, "stolen", pki.RoleViewer)
	legacy := s.client(t, "old-operator", pki.RoleNone)
	nodeLeaf, err := s.ca.Issue(pki.LeafSpec{Name: "node-b", Usage: pki.NodeUsage, NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	revoked := map[string]bool{pki.SerialHex(stolen): true}
	cases := []struct {
		name          string
		open          bool
		cert          *x509.Certificate
		authorization string
		status        int
	}{
		{name: "no credentials", status: 401},
		{name: "no credentials, metrics open", open: true},
		{name: "viewer certificate", cert: viewer},
		{name: "revoked certificate", cert: stolen, status: 403},
		{name: "certificate without a role", cert: legacy, status: 403},
		{name: "node certificate", cert: nodeLeaf.Cert},
		{name: "good token", authorization: "Bearer " + goodToken},
		{name: "limited token (metrics is no target)", authorization: "Bearer " + limitedToken},
		{name: "expired token", authorization: "Bearer " + expiredToken, status: 403},
		{name: "unknown token", authorization: "Bearer scadad_nope", status: 403},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := testGate(now, revoked)
			g.MetricsOpen = c.open
			ctx := request(t, c.cert, false, c.authorization)
			got := decide(t, ctx, g.Metrics(ctx))
			if c.status == 0 != got.ok || (!got.ok && got.status != c.status) {
				t.Errorf("let through %v status %d %+v; want status %d (0: through)", got.ok, got.status, got.body, c.status)
			}
		})
	}
}
