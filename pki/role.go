package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

// Role is what the holder of a client certificate may do. It travels in
// the certificate, as an organizational unit "scadad-role:<role>" the site
// CA signs, so every node reads the same answer without a shared table.
type Role string

const (
	// RoleNone is what a node certificate carries, and a client
	// certificate issued before roles existed. v0.1.0 let such a client
	// certificate act as admin for that release only; since v0.2.0 it is
	// refused (ClientRole).
	RoleNone Role = ""
	// RoleViewer reads: status, members, store-and-forward stats and
	// lists, deploy history and status, the audit log.
	RoleViewer Role = "viewer"
	// RoleOperator also fails over, retries and discards messages,
	// deploys and rolls back, and saves snapshots.
	RoleOperator Role = "operator"
	// RoleAdmin also changes membership, overrides, restores snapshots,
	// issues tokens and revokes.
	RoleAdmin Role = "admin"
	// RoleProducer only enqueues messages (HTTP or the control API's
	// SFEnqueue); it reads nothing.
	RoleProducer Role = "producer"
)

// roleOUPrefix marks the organizational unit that carries a role, and
// targetOUPrefix each store-and-forward target a producer certificate is
// limited to.
const (
	roleOUPrefix   = "scadad-role:"
	targetOUPrefix = "scadad-target:"
)

// CertAllowsTarget reports whether cert may enqueue to target: a
// certificate that names no targets may enqueue to any.
func CertAllowsTarget(cert *x509.Certificate, target string) bool {
	limited := false
	for _, ou := range cert.Subject.OrganizationalUnit {
		if name, ok := strings.CutPrefix(ou, targetOUPrefix); ok {
			if name == target {
				return true
			}
			limited = true
		}
	}
	return !limited
}

// CertTargets lists the targets cert is limited to; none means any.
func CertTargets(cert *x509.Certificate) []string {
	var out []string
	for _, ou := range cert.Subject.OrganizationalUnit {
		if name, ok := strings.CutPrefix(ou, targetOUPrefix); ok {
			out = append(out, name)
		}
	}
	return out
}

// ParseRole turns a role's name into a Role, refusing anything but the
// four roles.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleViewer, RoleOperator, RoleAdmin, RoleProducer:
		return r, nil
	}
	return RoleNone, fmt.Errorf("%w: role %q: want viewer, operator, admin or producer", ErrInvalidInput, s)
}

// CertRole reads the role a certificate carries: RoleNone when it carries
// none (a certificate issued before roles), an error when it carries an
// unknown role or more than one, which no scadactl writes.
func CertRole(cert *x509.Certificate) (Role, error) {
	found := RoleNone
	for _, ou := range cert.Subject.OrganizationalUnit {
		name, ok := strings.CutPrefix(ou, roleOUPrefix)
		if !ok {
			continue
		}
		r, err := ParseRole(name)
		if err != nil {
			return RoleNone, fmt.Errorf("certificate %q: %w", cert.Subject.CommonName, err)
		}
		if found != RoleNone && found != r {
			return RoleNone, fmt.Errorf("certificate %q: %w: carries both roles %s and %s", cert.Subject.CommonName, ErrInvalidInput, found, r)
		}
		found = r
	}
	return found, nil
}

// ErrNoRole is a client certificate that carries no role.
var ErrNoRole = errors.New("carries no role")

// ClientRole reads the role of a client certificate, refusing one without
// a role: a client certificate issued before roles (v0.1.0 took it for
// admin, for that release only) says nothing of what its holder may do.
// The error names the certificate and the fix.
func ClientRole(cert *x509.Certificate) (Role, error) {
	r, err := CertRole(cert)
	if err != nil {
		return RoleNone, err
	}
	if r == RoleNone {
		return RoleNone, fmt.Errorf("client certificate %q (serial %s) %w: certificates issued before roles are refused since v0.2.0; issue a replacement with scadactl certs issue --client --role viewer|operator|admin (producer for a feed) and revoke this one with scadactl certs revoke",
			cert.Subject.CommonName, SerialHex(cert), ErrNoRole)
	}
	return r, nil
}

// IsNodeCert reports whether cert was issued for a node (it may serve),
// not for an operator tool: a client certificate that happens to carry a
// node's name is not that node.
func IsNodeCert(cert *x509.Certificate) bool {
	return hasUsage(cert, x509.ExtKeyUsageServerAuth)
}
