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
	accessTokens  = []byte("tokens") // name → TokenRecord
)

// MaxTokenTargets bounds the targets one token may be limited to.
const MaxTokenTargets = 256

// MaxSerialHex bounds a revoked serial (RFC 5280: 20 octets, 40 hex digits).
const MaxSerialHex = 40

func (a *applier) certRevoke(c *fsmpb.CertRevoke, res *Result) error {
	if e := firstErr(checkSerial(c.Serial), checkText("certificate name", c.Name, MaxIDBytes), checkText("reason", c.Reason, MaxTextBytes)); e != nil {
		res.Err = e
		return nil
	}
	revoked, err := a.accessBucket(accessRevoked)
	if err != nil {
		return err
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

func (a *applier) accessBucket(name []byte) (*bolt.Bucket, error) {
	access, err := a.tx.CreateBucketIfNotExists(bucketAccess)
	if err != nil {
		return nil, fmt.Errorf("create access bucket: %w", err)
	}
	b, err := access.CreateBucketIfNotExists(name)
	if err != nil {
		return nil, fmt.Errorf("create access/%s bucket: %w", name, err)
	}
	return b, nil
}

func (a *applier) tokenCreate(c *fsmpb.TokenCreate, res *Result) error {
	e := firstErr(checkID("token name", c.Name))
	if e == nil && len(c.Sha256) != 32 {
		e = cmdErr(CodeInvalid, "token %q: hash is %d bytes, want a SHA-256 (32)", c.Name, len(c.Sha256))
	}
	if e == nil && len(c.Targets) > MaxTokenTargets {
		e = cmdErr(CodeInvalid, "token %q: %d targets, at most %d", c.Name, len(c.Targets), MaxTokenTargets)
	}
	for _, t := range c.Targets {
		if e == nil {
			e = checkID("token target", t)
		}
	}
	if e == nil && c.ExpiresUnixNano < 0 {
		e = cmdErr(CodeInvalid, "token %q: negative expiry", c.Name)
	}
	if e != nil {
		res.Err = e
		return nil
	}
	tokens, err := a.accessBucket(accessTokens)
	if err != nil {
		return err
	}
	if tokens.Get([]byte(c.Name)) != nil {
		res.Err = cmdErr(CodeInvalid, "token %q exists: revoke it first, or choose another name", c.Name)
		return nil
	}
	rec := &fsmpb.TokenRecord{Name: c.Name, Sha256: c.Sha256, Targets: c.Targets, ExpiresUnixNano: c.ExpiresUnixNano, Actor: a.cmd.Actor, StampUnixNano: a.cmd.StampUnixNano}
	if err := a.putRecord(tokens, []byte(c.Name), rec); err != nil {
		return fmt.Errorf("store token %q: %w", c.Name, err)
	}
	a.accessChanged = true
	detail := c.Name + " for " + strings.Join(c.Targets, ",")
	if len(c.Targets) == 0 {
		detail = c.Name + " for every target"
	}
	_, err = a.writeAudit("token-create", detail)
	return err
}

func (a *applier) tokenRevoke(c *fsmpb.TokenRevoke, res *Result) error {
	if e := checkID("token name", c.Name); e != nil {
		res.Err = e
		return nil
	}
	tokens, err := a.accessBucket(accessTokens)
	if err != nil {
		return err
	}
	if tokens.Get([]byte(c.Name)) == nil {
		res.Err = cmdErr(CodeUnknown, "no token %q", c.Name)
		return nil
	}
	if err := tokens.Delete([]byte(c.Name)); err != nil {
		return fmt.Errorf("delete token %q: %w", c.Name, err)
	}
	a.accessChanged = true
	_, err = a.writeAudit("token-revoke", c.Name)
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
	acc := &Access{Revoked: map[string]RevokedCert{}, Tokens: map[[32]byte]Token{},
		OPCUATrusted: map[string]OPCUATrustedCert{}, OPCUARejected: map[string]OPCUARejectedCert{}, OPCUAUsers: map[string]OPCUAUser{}}
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
	if tb := b.Bucket(accessTokens); tb != nil {
		err := tb.ForEach(func(k, v []byte) error {
			var rec fsmpb.TokenRecord
			if _, err := getRecord(tb, k, &rec); err != nil {
				return err
			}
			if len(rec.Sha256) != 32 {
				return fmt.Errorf("token %q: stored hash of %d bytes", rec.Name, len(rec.Sha256))
			}
			acc.Tokens[[32]byte(rec.Sha256)] = tokenFromRecord(&rec)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read tokens: %w", err)
		}
	}
	if err := readOPCUAAccess(b, acc); err != nil {
		return nil, err
	}
	return acc, nil
}
