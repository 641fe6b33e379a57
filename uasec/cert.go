package uasec

import (
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// ReadPEMOrDER reads a DER file, or the first block of a PEM file (of
// type wantType unless it is empty).
func ReadPEMOrDER(path, wantType string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if blk, _ := pem.Decode(b); blk != nil {
		if wantType != "" && blk.Type != wantType {
			return nil, fmt.Errorf("%s: PEM block %q, want %q", path, blk.Type, wantType)
		}
		return blk.Bytes, nil
	}
	return b, nil
}

// ParseRSAKey parses a PKCS #1 or PKCS #8 RSA private key.
func ParseRSAKey(der []byte) (*rsa.PrivateKey, error) {
	if k, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, err
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("key is %T, OPC UA needs RSA", k)
	}
	return rk, nil
}

// TrustedBy reports whether cert is one of trusted, or is issued (at now)
// by a CA certificate among them.
func TrustedBy(cert *x509.Certificate, trusted []*x509.Certificate, now time.Time) bool {
	roots := x509.NewCertPool()
	for _, c := range trusted {
		if c.Equal(cert) {
			return true
		}
		roots.AddCert(c)
	}
	if len(trusted) == 0 {
		return false
	}
	_, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err == nil
}

// ReadCertificateFile reads the certificates in a DER file or a PEM file
// of one or more CERTIFICATE blocks.
func ReadCertificateFile(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	certs, err := parseCertificates(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return certs, nil
}

// Thumbprint is the SHA-1 thumbprint OPC UA tools show for a certificate,
// in hexadecimal.
func Thumbprint(der []byte) string {
	sum := sha1.Sum(der)
	return strings.ToUpper(hex.EncodeToString(sum[:]))
}

// DescribeCert names a certificate for an operator: its common name,
// thumbprint and application URI.
func DescribeCert(cert *x509.Certificate) string {
	s := fmt.Sprintf("%q (thumbprint %s", cert.Subject.CommonName, Thumbprint(cert.Raw))
	if len(cert.URIs) > 0 {
		s += ", application URI " + cert.URIs[0].String()
	}
	return s + ")"
}

func parseCertificates(b []byte) ([]*x509.Certificate, error) {
	if blk, _ := pem.Decode(b); blk == nil {
		c, err := x509.ParseCertificate(b)
		if err != nil {
			return nil, fmt.Errorf("neither a PEM nor a DER certificate: %w", err)
		}
		return []*x509.Certificate{c}, nil
	}
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("a PEM file without a CERTIFICATE block")
	}
	return out, nil
}
