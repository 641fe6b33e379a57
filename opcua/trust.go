package opcua

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/uasec"
)

// maxRejected bounds the certificates kept in the rejected folder, so a
// client that keeps presenting new certificates cannot fill the disk.
const maxRejected = 100

// TrustStore is the site's replicated OPC UA trust store, as the server
// needs it: the daemon's adapter over the replicated state. Trusted is
// asked at every secure channel and session, so an entry trusted or
// removed on any node counts at the next one, with no restart.
type TrustStore interface {
	// Trusted returns the trusted client certificates and issuing CAs.
	Trusted() []*x509.Certificate
	// Rejected records a refused certificate for the operator to review
	// (scadactl opcua trust rejected). It must not block.
	Rejected(cert *x509.Certificate, reason string)
}

// trustList decides which client application certificates may open a
// session on a secure channel, the way OPC UA servers commonly do: a
// certificate is trusted when it is in the replicated store or the
// trusted folder, or is issued by a CA certificate that is; a refused one
// is reported to the store and copied into the rejected folder, so an
// operator who knows the client trusts it.
//
// The trusted folder is the trust list of releases before the replicated
// store: it is per node, still read for this release, and its entries go
// into the store with scadactl opcua trust import. It is read on every
// check: sessions are few.
type trustList struct {
	store    TrustStore
	trusted  string
	rejected string
	// folderOnly is told of a certificate trusted by this node's folder
	// and not by the replicated store: the other node may refuse it.
	folderOnly func(cert *x509.Certificate)
}

// untrustedError says why a client certificate was refused and with which
// OPC UA status. why is what the client is told: what is wrong, never
// where this server keeps its files; advice, for the operator's log only,
// says what to do about it and where.
type untrustedError struct {
	code   ua.StatusCode
	why    string
	advice string
}

func (e *untrustedError) Error() string { return e.why + e.advice }

// check returns nil when der is trusted at now; otherwise an
// *untrustedError naming why, after reporting der to the store and
// keeping a copy in the rejected folder. An unreadable trusted folder
// refuses everyone (and says so).
func (t *trustList) check(der []byte, now time.Time) error {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return &untrustedError{code: ua.StatusBadCertificateInvalid, why: fmt.Sprintf("client certificate is not a valid X.509 certificate: %v", err)}
	}
	if now.Before(cert.NotBefore) || now.After(cert.NotAfter) {
		// Trusting it would not help: the client needs a renewed one.
		return &untrustedError{code: ua.StatusBadCertificateTimeInvalid, why: fmt.Sprintf("client certificate %s is valid from %s to %s only; the client needs a renewed certificate",
			uasec.DescribeCert(cert), cert.NotBefore.UTC().Format(time.RFC3339), cert.NotAfter.UTC().Format(time.RFC3339))}
	}
	if t.store != nil && uasec.TrustedBy(cert, t.store.Trusted(), now) {
		return nil
	}
	folder, err := readCertificates(t.trusted)
	if err != nil {
		return &untrustedError{code: ua.StatusBadCertificateUntrusted, why: "the server cannot read its trusted client certificates",
			advice: fmt.Sprintf(": %v", err)}
	}
	if uasec.TrustedBy(cert, folder, now) {
		if t.store != nil && t.folderOnly != nil {
			t.folderOnly(cert)
		}
		return nil
	}
	why := fmt.Sprintf("client certificate %s is not trusted by this server; its operator must trust it", uasec.DescribeCert(cert))
	where := t.reject(cert)
	advice := fmt.Sprintf("%s; to trust it, put it (or its issuing CA) in %s on every node", where, t.trusted)
	if t.store != nil {
		t.store.Rejected(cert, "not trusted")
		advice = fmt.Sprintf("%s; to trust it on every node: scadactl opcua trust add --rejected %s", where, uasec.Thumbprint(cert.Raw))
	}
	return &untrustedError{code: ua.StatusBadCertificateUntrusted, why: why, advice: advice}
}

// reject keeps a copy of cert in the rejected folder and says where.
func (t *trustList) reject(cert *x509.Certificate) string {
	if t.rejected == "" {
		return ""
	}
	name := filepath.Join(t.rejected, certFileName(cert))
	if _, err := os.Stat(name); err == nil {
		return " (a copy is in " + name + ")"
	}
	if err := os.MkdirAll(t.rejected, 0o750); err != nil {
		return ""
	}
	if entries, err := os.ReadDir(t.rejected); err != nil || len(entries) >= maxRejected {
		return ""
	}
	if err := os.WriteFile(name, cert.Raw, 0o640); err != nil {
		return ""
	}
	return " (a copy is in " + name + ")"
}

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// certFileName follows the common OPC UA folder convention: the common
// name, then the thumbprint in brackets.
func certFileName(cert *x509.Certificate) string {
	cn := unsafeFileChars.ReplaceAllString(cert.Subject.CommonName, "_")
	if len(cn) > 64 {
		cn = cn[:64]
	}
	return fmt.Sprintf("%s [%s].der", cn, uasec.Thumbprint(cert.Raw))
}

// readCertificates reads every certificate in dir: DER files, or PEM files
// of one or more CERTIFICATE blocks. A missing folder holds none. A file
// that is neither is an error naming it, so a certificate an operator put
// there does not silently fail to count.
func readCertificates(dir string) ([]*x509.Certificate, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		certs, err := uasec.ReadCertificateFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, certs...)
	}
	return out, nil
}
