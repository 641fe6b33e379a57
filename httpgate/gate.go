package httpgate

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/scadad/scadad/pki"
)

// Gate checks requests on the HTTP listener.
type Gate struct {
	// Insecure lets every request through: a plain-HTTP lab listener has
	// no certificate to check.
	Insecure bool
	// MetricsOpen serves /metrics to anyone.
	MetricsOpen bool
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
		refuse(ctx, fasthttp.StatusUnauthorized, refusal{
			Code: "unauthenticated", Missing: "client certificate",
			Error: "no credentials: enqueue needs a client certificate from the site CA with role producer (scadactl certs issue --client --role producer --targets " + target + ")",
		})
		return false
	}
	role, err := pki.CertRole(cert)
	if err != nil {
		refuse(ctx, fasthttp.StatusForbidden, refusal{Code: "forbidden", Error: err.Error()})
		return false
	}
	switch role {
	case pki.RoleProducer, pki.RoleOperator, pki.RoleAdmin, pki.RoleNone:
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
	if g.Insecure || g.MetricsOpen || peerCert(ctx) != nil {
		return true
	}
	refuse(ctx, fasthttp.StatusUnauthorized, refusal{
		Code: "unauthenticated", Missing: "client certificate",
		Error: "no credentials: /metrics needs a client certificate from the site CA (or http.metrics_open: true in the node config)",
	})
	return false
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
