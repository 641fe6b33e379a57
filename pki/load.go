package pki

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"
)

// Refusal reasons. Load errors wrap one of these so callers can tell them
// apart with errors.Is; the message itself names the file and the details.
var (
	ErrMissing      = errors.New("file missing")
	ErrUnparsable   = errors.New("unparsable")
	ErrExpired      = errors.New("certificate expired")
	ErrNotYetValid  = errors.New("certificate not yet valid")
	ErrKeyMismatch  = errors.New("key does not match certificate")
	ErrForeignCA    = errors.New("certificate not signed by the site CA (foreign CA)")
	ErrNotCA        = errors.New("not a CA certificate")
	ErrWrongUsage   = errors.New("certificate not issued for this use")
	ErrNoPeerCert   = errors.New("peer presented no certificate")
	ErrUnknownPeer  = errors.New("peer certificate names no configured member")
	ErrInvalidInput = errors.New("invalid input")
)

// LoadServerTLS builds the mutual-TLS configuration a node serves with: TLS
// 1.3, the node certificate, client certificates required and verified
// against the site CA only. It fails closed on any problem with the files.
func LoadServerTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	ca, cert, key, err := loadFiles(caFile, certFile, keyFile, x509.ExtKeyUsageServerAuth, time.Now())
	if err != nil {
		return nil, fmt.Errorf("load server TLS: %w", err)
	}
	return ServerConfig(ca, cert, key)
}

// LoadClientTLS builds the mutual-TLS configuration for dialing a node: TLS
// 1.3, the client (or node) certificate, servers verified against the site CA
// only. Callers that dial by IP address set ServerName to the node id they
// expect, which every node certificate carries as a SAN.
func LoadClientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	ca, cert, key, err := loadFiles(caFile, certFile, keyFile, x509.ExtKeyUsageClientAuth, time.Now())
	if err != nil {
		return nil, fmt.Errorf("load client TLS: %w", err)
	}
	return ClientConfig(ca, cert, key)
}

// Validity is when a node's certificate and its site CA stop being valid.
type Validity struct {
	Cert, CA time.Time // each one's NotAfter
}

// ReadValidity reads when the certificate in certFile and the CA in caFile
// expire.
func ReadValidity(caFile, certFile string) (Validity, error) {
	ca, err := readCert(caFile, "CA certificate")
	if err != nil {
		return Validity{}, err
	}
	cert, err := readCert(certFile, "certificate")
	if err != nil {
		return Validity{}, err
	}
	return Validity{Cert: cert.NotAfter, CA: ca.NotAfter}, nil
}

// ServerConfig is LoadServerTLS for certificates already in memory. It
// carries RootCAs too, so a node can use one configuration both ways.
func ServerConfig(ca, cert *x509.Certificate, key crypto.Signer) (*tls.Config, error) {
	if err := checkPair(ca, cert, key, x509.ExtKeyUsageServerAuth, time.Now()); err != nil {
		return nil, fmt.Errorf("server TLS: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		RootCAs:      pool,
	}, nil
}

// ClientConfig is LoadClientTLS for certificates already in memory.
func ClientConfig(ca, cert *x509.Certificate, key crypto.Signer) (*tls.Config, error) {
	if err := checkPair(ca, cert, key, x509.ExtKeyUsageClientAuth, time.Now()); err != nil {
		return nil, fmt.Errorf("client TLS: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}},
		RootCAs:      pool,
		// A node's server side may reuse this config; keep it fail-closed too.
		ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs:  pool,
	}, nil
}

// PeerName returns the common name of the verified peer certificate of a
// completed handshake.
func PeerName(cs tls.ConnectionState) (string, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", ErrNoPeerCert
	}
	return cs.PeerCertificates[0].Subject.CommonName, nil
}

func loadFiles(caFile, certFile, keyFile string, usage x509.ExtKeyUsage, now time.Time) (*x509.Certificate, *x509.Certificate, crypto.Signer, error) {
	ca, err := readCert(caFile, "CA certificate")
	if err != nil {
		return nil, nil, nil, err
	}
	if !ca.IsCA {
		return nil, nil, nil, fmt.Errorf("CA certificate %s: %w (subject %q)", caFile, ErrNotCA, ca.Subject.CommonName)
	}
	if err := checkValidity(ca, caFile, "CA certificate", now); err != nil {
		return nil, nil, nil, err
	}
	cert, err := readCert(certFile, "certificate")
	if err != nil {
		return nil, nil, nil, err
	}
	if err := checkValidity(cert, certFile, "certificate", now); err != nil {
		return nil, nil, nil, err
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		return nil, nil, nil, fmt.Errorf("certificate %s (CN %q, issuer %q): %w %s (CN %q): %v",
			certFile, cert.Subject.CommonName, cert.Issuer.CommonName, ErrForeignCA, caFile, ca.Subject.CommonName, err)
	}
	if !hasUsage(cert, usage) {
		return nil, nil, nil, fmt.Errorf("certificate %s (CN %q): %w: lacks %s", certFile, cert.Subject.CommonName, ErrWrongUsage, usageName(usage))
	}
	key, err := readKey(keyFile)
	if err != nil {
		return nil, nil, nil, err
	}
	if !publicKeysEqual(key.Public(), cert.PublicKey) {
		return nil, nil, nil, fmt.Errorf("private key %s: %w %s (CN %q)", keyFile, ErrKeyMismatch, certFile, cert.Subject.CommonName)
	}
	return ca, cert, key, nil
}

// checkPair applies the file checks to in-memory certificates.
func checkPair(ca, cert *x509.Certificate, key crypto.Signer, usage x509.ExtKeyUsage, now time.Time) error {
	if ca == nil || cert == nil || key == nil {
		return fmt.Errorf("%w: CA, certificate and key are all required", ErrInvalidInput)
	}
	if !ca.IsCA {
		return fmt.Errorf("CA %q: %w", ca.Subject.CommonName, ErrNotCA)
	}
	if err := checkValidity(ca, "(memory)", "CA certificate", now); err != nil {
		return err
	}
	if err := checkValidity(cert, "(memory)", "certificate", now); err != nil {
		return err
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		return fmt.Errorf("certificate %q (issuer %q): %w %q: %v", cert.Subject.CommonName, cert.Issuer.CommonName, ErrForeignCA, ca.Subject.CommonName, err)
	}
	if !hasUsage(cert, usage) {
		return fmt.Errorf("certificate %q: %w: lacks %s", cert.Subject.CommonName, ErrWrongUsage, usageName(usage))
	}
	if !publicKeysEqual(key.Public(), cert.PublicKey) {
		return fmt.Errorf("certificate %q: %w", cert.Subject.CommonName, ErrKeyMismatch)
	}
	return nil
}

func readCert(path, what string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s %s: %w", what, path, ErrMissing)
		}
		return nil, fmt.Errorf("read %s %s: %w", what, path, err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s %s: %w: no PEM CERTIFICATE block", what, path, ErrUnparsable)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %v", what, path, ErrUnparsable, err)
	}
	return cert, nil
}

func readKey(path string) (crypto.Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("private key %s: %w", path, ErrMissing)
		}
		return nil, fmt.Errorf("read private key %s: %w", path, err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("private key %s: %w: no PEM block", path, ErrUnparsable)
	}
	var parsed any
	switch block.Type {
	case "PRIVATE KEY":
		parsed, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		parsed, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("private key %s: %w: unexpected PEM block %q", path, ErrUnparsable, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("private key %s: %w: %v", path, ErrUnparsable, err)
	}
	signer, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key %s: %w: %T cannot sign", path, ErrUnparsable, parsed)
	}
	return signer, nil
}

func checkValidity(cert *x509.Certificate, path, what string, now time.Time) error {
	if now.After(cert.NotAfter) {
		return fmt.Errorf("%s %s (CN %q): %w: NotAfter %s", what, path, cert.Subject.CommonName, ErrExpired, cert.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(cert.NotBefore) {
		return fmt.Errorf("%s %s (CN %q): %w: NotBefore %s", what, path, cert.Subject.CommonName, ErrNotYetValid, cert.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

func hasUsage(cert *x509.Certificate, usage x509.ExtKeyUsage) bool {
	for _, u := range cert.ExtKeyUsage {
		if u == usage || u == x509.ExtKeyUsageAny {
			return true
		}
	}
	return false
}

func usageName(u x509.ExtKeyUsage) string {
	switch u {
	case x509.ExtKeyUsageServerAuth:
		return "serverAuth"
	case x509.ExtKeyUsageClientAuth:
		return "clientAuth"
	default:
		return fmt.Sprintf("ext key usage %d", int(u))
	}
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}
