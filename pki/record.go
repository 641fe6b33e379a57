package pki

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// IssuedFile is the issuance record kept beside the site CA: one JSON line
// per certificate Init or Issue signed, so `scadactl certs list` can show
// what exists and `certs revoke NAME`-style look-ups need no certificate
// file at hand.
const IssuedFile = "issued.jsonl"

// Issued is one line of the issuance record.
type Issued struct {
	Serial   string    `json:"serial"` // lower-case hex, as SerialHex writes it
	Name     string    `json:"name"`
	Usage    string    `json:"usage"` // "node" or "client"
	Role     Role      `json:"role,omitempty"`
	NotAfter time.Time `json:"not_after"`
	IssuedAt time.Time `json:"issued_at"`
}

// SerialHex is how scadad names a certificate's serial number everywhere
// (deny list, issuance record, logs): lower-case hex without separators.
func SerialHex(cert *x509.Certificate) string {
	return cert.SerialNumber.Text(16)
}

// ParseSerial reads a serial number as an operator may write it: hex,
// with or without colons or a 0x prefix, as openssl and SerialHex print it.
func ParseSerial(s string) (string, error) {
	t := strings.ToLower(strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(s), "0x"), "0X"))
	t = strings.ReplaceAll(t, ":", "")
	n, ok := new(big.Int).SetString(t, 16)
	if !ok || t == "" || n.Sign() <= 0 {
		return "", fmt.Errorf("%w: serial %q is not a positive hex number", ErrInvalidInput, s)
	}
	return n.Text(16), nil
}

func usageLabel(u Usage) string {
	if u == NodeUsage {
		return "node"
	}
	return "client"
}

// recordIssued appends leaf to dir's issuance record.
func recordIssued(dir string, leaf *Leaf, usage Usage, role Role) error {
	line, err := json.Marshal(Issued{
		Serial: SerialHex(leaf.Cert), Name: leaf.Cert.Subject.CommonName, Usage: usageLabel(usage), Role: role,
		NotAfter: leaf.Cert.NotAfter.UTC(), IssuedAt: time.Now().UTC().Truncate(time.Second),
	})
	if err != nil {
		return fmt.Errorf("record issued certificate %q: %w", leaf.Cert.Subject.CommonName, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, IssuedFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("record issued certificate %q: %w", leaf.Cert.Subject.CommonName, err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("record issued certificate %q in %s: %w", leaf.Cert.Subject.CommonName, f.Name(), err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("record issued certificate %q in %s: %w", leaf.Cert.Subject.CommonName, f.Name(), err)
	}
	return f.Close()
}

// ReadIssued reads dir's issuance record, oldest first. A site whose CA
// predates the record has none: an empty list, not an error.
func ReadIssued(dir string) ([]Issued, error) {
	path := filepath.Join(dir, IssuedFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read issuance record: %w", err)
	}
	var out []Issued
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var rec Issued
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("issuance record %s line %d: %w: %v", path, n, ErrUnparsable, err)
		}
		out = append(out, rec)
	}
	return out, sc.Err()
}
