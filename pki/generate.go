package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"time"
)

// clockSkew backdates NotBefore so a peer whose clock runs a little behind
// still accepts a certificate minted a moment ago.
const clockSkew = 5 * time.Minute

// CA is a site certificate authority held in memory.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// Leaf is a node or client certificate with its key, held in memory.
type Leaf struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// Usage says what a leaf certificate is for.
type Usage int

const (
	// NodeUsage certifies a scadad node: it serves (raft, control API) and
	// dials its peers, so it carries serverAuth and clientAuth.
	NodeUsage Usage = iota
	// ClientUsage certifies an operator tool such as scadactl: clientAuth only.
	ClientUsage
)

// LeafSpec describes one leaf certificate to issue.
type LeafSpec struct {
	// Name is the certificate's common name: the node id or client name.
	Name  string
	Usage Usage
	// NotBefore and NotAfter bound the validity window. A zero NotBefore means
	// now minus a small clock-skew allowance.
	NotBefore time.Time
	NotAfter  time.Time
	// ExtraSANs are added to the node defaults (127.0.0.1, ::1, localhost and
	// Name). Entries that parse as IP addresses become IP SANs.
	ExtraSANs []string
	// Role is what a client certificate's holder may do; node certificates
	// carry none.
	Role Role
	// Targets limits a client certificate to these store-and-forward
	// targets on the HTTP listener; none means any.
	Targets []string
}

// GenerateCA creates an ECDSA P-256 certificate authority for site, valid
// from notBefore (zero = now minus clock skew) until notAfter.
func GenerateCA(site string, notBefore, notAfter time.Time) (*CA, error) {
	if site == "" {
		return nil, errors.New("generate CA: site name is empty")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key for site %q: %w", site, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, fmt.Errorf("generate CA serial for site %q: %w", site, err)
	}
	if notBefore.IsZero() {
		notBefore = time.Now().Add(-clockSkew)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "scadad site CA " + site, Organization: []string{"scadad"}, OrganizationalUnit: []string{site}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sign CA certificate for site %q: %w", site, err)
	}
	return newCA(der, key)
}

func newCA(der []byte, key *ecdsa.PrivateKey) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse generated CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// Issue signs a leaf certificate described by spec.
func (ca *CA) Issue(spec LeafSpec) (*Leaf, error) {
	if spec.Name == "" {
		return nil, errors.New("issue certificate: name is empty")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key for %q: %w", spec.Name, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, fmt.Errorf("generate serial for %q: %w", spec.Name, err)
	}
	notBefore := spec.NotBefore
	if notBefore.IsZero() {
		notBefore = time.Now().Add(-clockSkew)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: spec.Name, Organization: []string{"scadad"}},
		NotBefore:    notBefore,
		NotAfter:     spec.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	switch spec.Usage {
	case NodeUsage:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		sans := append([]string{"127.0.0.1", "::1", "localhost", spec.Name}, spec.ExtraSANs...)
		addSANs(tmpl, sans)
	case ClientUsage:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		addSANs(tmpl, spec.ExtraSANs)
		if spec.Role != RoleNone {
			if _, err := ParseRole(string(spec.Role)); err != nil {
				return nil, fmt.Errorf("issue certificate for %q: %w", spec.Name, err)
			}
			tmpl.Subject.OrganizationalUnit = []string{roleOUPrefix + string(spec.Role)}
		}
		for _, t := range spec.Targets {
			if t == "" || strings.ContainsAny(t, "/,") {
				return nil, fmt.Errorf("issue certificate for %q: %w: target %q", spec.Name, ErrInvalidInput, t)
			}
			tmpl.Subject.OrganizationalUnit = append(tmpl.Subject.OrganizationalUnit, targetOUPrefix+t)
		}
	default:
		return nil, fmt.Errorf("issue certificate for %q: unknown usage %d", spec.Name, spec.Usage)
	}
	if spec.Usage == NodeUsage && (spec.Role != RoleNone || len(spec.Targets) > 0) {
		return nil, fmt.Errorf("issue certificate for %q: %w: a node certificate carries no role or targets", spec.Name, ErrInvalidInput)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %q: %w", spec.Name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse certificate for %q: %w", spec.Name, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &Leaf{Cert: cert, Key: key, CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// IssueNode signs a node certificate valid for validity from now.
func (ca *CA) IssueNode(name string, validity time.Duration) (*Leaf, error) {
	return ca.Issue(LeafSpec{Name: name, Usage: NodeUsage, NotAfter: time.Now().Add(validity)})
}

// IssueClient signs an admin client certificate valid for validity from
// now.
func (ca *CA) IssueClient(name string, validity time.Duration) (*Leaf, error) {
	return ca.IssueClientRole(name, RoleAdmin, validity)
}

// IssueClientRole signs a client certificate carrying role, valid for
// validity from now.
func (ca *CA) IssueClientRole(name string, role Role, validity time.Duration) (*Leaf, error) {
	return ca.Issue(LeafSpec{Name: name, Usage: ClientUsage, Role: role, NotAfter: time.Now().Add(validity)})
}

// Pool returns a certificate pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}

// TLSCertificate returns the leaf as a tls.Certificate.
func (l *Leaf) TLSCertificate() (tls.Certificate, error) {
	c, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pair certificate %q with its key: %w", l.Cert.Subject.CommonName, err)
	}
	return c, nil
}

// Site is an in-memory site PKI: a CA and the certificates it issued. Tests
// in other packages use it to build TLS configurations without files.
type Site struct {
	CA      *CA
	Nodes   map[string]*Leaf
	Clients map[string]*Leaf
}

// GenerateSite creates a CA and one certificate per node and client, all
// valid for validity from now.
func GenerateSite(site string, nodes, clients []string, validity time.Duration) (*Site, error) {
	ca, err := GenerateCA(site, time.Time{}, time.Now().Add(validity))
	if err != nil {
		return nil, err
	}
	s := &Site{CA: ca, Nodes: make(map[string]*Leaf), Clients: make(map[string]*Leaf)}
	for _, n := range nodes {
		leaf, err := ca.IssueNode(n, validity)
		if err != nil {
			return nil, fmt.Errorf("generate site %q: %w", site, err)
		}
		s.Nodes[n] = leaf
	}
	for _, c := range clients {
		leaf, err := ca.IssueClient(c, validity)
		if err != nil {
			return nil, fmt.Errorf("generate site %q: %w", site, err)
		}
		s.Clients[c] = leaf
	}
	return s, nil
}

// ServerTLS returns the mutual-TLS server configuration for node name.
func (s *Site) ServerTLS(name string) (*tls.Config, error) {
	leaf, ok := s.Nodes[name]
	if !ok {
		return nil, fmt.Errorf("server TLS for %q: no such node in the generated site", name)
	}
	return ServerConfig(s.CA.Cert, leaf.Cert, leaf.Key)
}

// ClientTLS returns the mutual-TLS client configuration for a node or client
// certificate called name.
func (s *Site) ClientTLS(name string) (*tls.Config, error) {
	leaf, ok := s.Nodes[name]
	if !ok {
		leaf, ok = s.Clients[name]
	}
	if !ok {
		return nil, fmt.Errorf("client TLS for %q: no such node or client in the generated site", name)
	}
	return ClientConfig(s.CA.Cert, leaf.Cert, leaf.Key)
}

func addSANs(tmpl *x509.Certificate, sans []string) {
	seenDNS := map[string]bool{}
	seenIP := map[string]bool{}
	for _, s := range sans {
		if ip := net.ParseIP(s); ip != nil {
			if !seenIP[ip.String()] {
				seenIP[ip.String()] = true
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			}
			continue
		}
		if s != "" && !seenDNS[s] {
			seenDNS[s] = true
			tmpl.DNSNames = append(tmpl.DNSNames, s)
		}
	}
}

func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
