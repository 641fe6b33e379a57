package fsm

import (
	"fmt"
	"math/big"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/scadad/scadad/fsm/fsmpb"
)

// The access bucket holds the site's access control: the certificate deny
// list. It is made by the first command that needs it, so a state that
// never revoked anything is the same as before the bucket existed.
var (
	bucketAccess  = []byte("access")
	accessRevoked = []byte("revoked")
)

// MaxSerialHex bounds a revoked serial (RFC 5280: 20 octets, 40 hex digits).
const MaxSerialHex = 40

func (a *applier) certRevoke(c *fsmpb.CertRevoke, res *Result) error {
	if e := firstErr(checkSerial(c.Serial), checkText("certificate name", c.Name, MaxIDBytes), checkText("reason", c.Reason, MaxTextBytes)); e != nil {
		res.Err = e
		return nil
	}
	access, err := a.tx.CreateBucketIfNotExists(bucketAccess)
	if err != nil {
		return fmt.Errorf("create access bucket: %w", err)
	}
	revoked, err := access.CreateBucketIfNotExists(accessRevoked)
	if err != nil {
		return fmt.Errorf("create revoked bucket: %w", err)
	}
	if revoked.Get([]byte(c.Serial)) != nil {
		return nil // already revoked: the first revocation stands
	}
	rec := &fsmpb.RevokedCert{Serial: c.Serial, Name: c.Name, Reason: c.Reason, Actor: a.cmd.Actor, StampUnixNano: a.cmd.StampUnixNano, LogIndex: a.index}
	if err := a.putRecord(revoked, []byte(c.Serial), rec); err != nil {
		return fmt.Errorf("store revoked certificate %s: %w", c.Serial, err)
	}
	a.accessChanged = true
	detail := "serial " + c.Serial
	if c.Name != "" {
		detail += " (" + c.Name + ")"
	}
	if c.Reason != "" {
		detail += ": " + c.Reason
	}
	_, err = a.writeAudit("cert-revoke", detail)
	return err
}

// checkSerial accepts a serial as pki.SerialHex writes it: lower-case hex
// of a positive number, no leading zeros, no separators.
func checkSerial(s string) *CommandError {
	if s == "" || len(s) > MaxSerialHex || strings.TrimLeft(s, "0123456789abcdef") != "" || s[0] == '0' {
		return cmdErr(CodeInvalid, "certificate serial %q: want lower-case hex without leading zeros, at most %d digits", s, MaxSerialHex)
	}
	if n, ok := new(big.Int).SetString(s, 16); !ok || n.Sign() <= 0 {
		return cmdErr(CodeInvalid, "certificate serial %q is not a positive number", s)
	}
	return nil
}

// readAccess reads the access state of tx.
func readAccess(tx *bolt.Tx) (*Access, error) {
	acc := &Access{Revoked: map[string]RevokedCert{}}
	b := tx.Bucket(bucketAccess)
	if b == nil {
		return acc, nil
	}
	if r := b.Bucket(accessRevoked); r != nil {
		err := r.ForEach(func(k, v []byte) error {
			var rec fsmpb.RevokedCert
			if _, err := getRecord(r, k, &rec); err != nil {
				return err
			}
			acc.Revoked[rec.Serial] = revokedFromRecord(&rec)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read revoked certificates: %w", err)
		}
	}
	return acc, nil
}
