package pki

import (
	"crypto/x509"
	"fmt"
	"strings"
)

// Role is what the holder of a client certificate may do. It travels in
// the certificate, as an organizational unit "scadad-role:<role>" the site
// CA signs, so every node reads the same answer without a shared table.
type Role string

const (
	// RoleNone is a client certificate issued before roles existed. The
	// control API treats it as admin for one release, with a warning, so an
	// upgrade does not lock the operators out; see docs/security.md.
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

// IsNodeCert reports whether cert was issued for a node (it may serve),
// not for an operator tool: a client certificate that happens to carry a
// node's name is not that node.
func IsNodeCert(cert *x509.Certificate) bool {
	return hasUsage(cert, x509.ExtKeyUsageServerAuth)
}
