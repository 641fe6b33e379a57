package console

import (
	"crypto/tls"
	"crypto/x509"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/scadad/scadad/pki"
)

// The console reads a role off the client certificate as the control API
// does: a certificate without a role (v0.1.0 took it for admin, for that
// release only) and a node's certificate act as nobody.
func TestCertificateRoles(t *testing.T) {
	site, err := pki.GenerateSite("s", []string{"node-a"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(role pki.Role) *x509.Certificate {
		l, err := site.CA.IssueClientRole("someone", role, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return l.Cert
	}
	for _, c := range []struct {
		name string
		cert *x509.Certificate
		want Role
	}{
		{"viewer", leaf(pki.RoleViewer), Viewer},
		{"operator", leaf(pki.RoleOperator), Operator},
		{"admin", leaf(pki.RoleAdmin), Operator},
		{"producer", leaf(pki.RoleProducer), Nobody},
		{"no role", leaf(pki.RoleNone), Nobody},
		{"node", site.Nodes["node-a"].Cert, Nobody},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c.cert}, VerifiedChains: [][]*x509.Certificate{{c.cert}}}
		if got := CertificateRoles(r); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
