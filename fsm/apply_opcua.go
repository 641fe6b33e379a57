package fsm

import (
	"crypto/sha1" // OPC UA names certificates by their SHA-1 thumbprint (Part 6 §6.2.5)
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/passhash"
)

// The site's OPC UA trust store and user-name identities, in the access
// bucket: every voter's OPC UA server decides from them, so a failover
// never finds a trust list or a password the other node did not have.
var (
	accessOPCUATrusted  = []byte("opcua-trusted")  // thumbprint → OPCUATrustedRecord
	accessOPCUARejected = []byte("opcua-rejected") // thumbprint → OPCUARejectedRecord
	accessOPCUAUsers    = []byte("opcua-users")    // name → OPCUAUserRecord
)

const (
	// MaxCertificateBytes bounds one certificate in the trust store.
	MaxCertificateBytes = 16 << 10
	// MaxOPCUATrusted bounds the trusted certificates.
	MaxOPCUATrusted = 1000
	// MaxOPCUARejected bounds the rejected certificates kept for review:
	// a client that keeps presenting new certificates cannot grow the
	// state.
	MaxOPCUARejected = 100
	// MaxOPCUAUsers bounds the user-name identities.
	MaxOPCUAUsers = 1000
)

// Thumbprint is the OPC UA thumbprint of a DER certificate: its SHA-1, in
// upper-case hexadecimal, as OPC UA tools show it.
func Thumbprint(der []byte) string {
	sum := sha1.Sum(der)
	return strings.ToUpper(hex.EncodeToString(sum[:]))
}

// atLeast reports whether b holds n keys or more. It walks a cursor:
// bbolt's Stats leaves out what this write transaction put, and batches
// differ from node to node.
func atLeast(b *bolt.Bucket, n int) bool {
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if n--; n <= 0 {
			return true
		}
	}
	return n <= 0
}

func checkCertificateBytes(der []byte) *CommandError {
	if len(der) == 0 || len(der) > MaxCertificateBytes {
		return cmdErr(CodeInvalid, "certificate of %d bytes: want 1 to %d", len(der), MaxCertificateBytes)
	}
	return nil
}

func checkThumbprint(s string) *CommandError {
	if len(s) != 2*sha1.Size || strings.TrimLeft(s, "0123456789ABCDEF") != "" {
		return cmdErr(CodeInvalid, "thumbprint %q: want the certificate's SHA-1 as %d upper-case hex digits", s, 2*sha1.Size)
	}
	return nil
}

func (a *applier) opcuaTrustAdd(c *fsmpb.OPCUATrustAdd, res *Result) error {
	if e := firstErr(checkCertificateBytes(c.Der), checkText("certificate name", c.Name, MaxIDBytes)); e != nil {
		res.Err = e
		return nil
	}
	trusted, err := a.accessBucket(accessOPCUATrusted)
	if err != nil {
		return err
	}
	thumb := Thumbprint(c.Der)
	key := []byte(thumb)
	if trusted.Get(key) == nil && atLeast(trusted, MaxOPCUATrusted) {
		res.Err = cmdErr(CodeInvalid, "the OPC UA trust list holds %d certificates already; remove some, or trust their issuing CA instead", MaxOPCUATrusted)
		return nil
	}
	rec := &fsmpb.OPCUATrustedRecord{Der: c.Der, Name: c.Name, Actor: a.cmd.Actor, StampUnixNano: a.cmd.StampUnixNano, LogIndex: a.index}
	if err := a.putRecord(trusted, key, rec); err != nil {
		return fmt.Errorf("store trusted OPC UA certificate %s: %w", thumb, err)
	}
	rejected, err := a.accessBucket(accessOPCUARejected)
	if err != nil {
		return err
	}
	if err := rejected.Delete(key); err != nil {
		return fmt.Errorf("clear rejected OPC UA certificate %s: %w", thumb, err)
	}
	a.accessChanged = true
	detail := thumb
	if c.Name != "" {
		detail += " (" + c.Name + ")"
	}
	_, err = a.writeAudit("opcua-trust-add", detail)
	return err
}

func (a *applier) opcuaTrustRemove(c *fsmpb.OPCUATrustRemove, res *Result) error {
	if e := checkThumbprint(c.Thumbprint); e != nil {
		res.Err = e
		return nil
	}
	key := []byte(c.Thumbprint)
	found := false
	for _, name := range [][]byte{accessOPCUATrusted, accessOPCUARejected} {
		b, err := a.accessBucket(name)
		if err != nil {
			return err
		}
		if b.Get(key) == nil {
			continue
		}
		found = true
		if err := b.Delete(key); err != nil {
			return fmt.Errorf("delete OPC UA certificate %s from %s: %w", c.Thumbprint, name, err)
		}
	}
	if !found {
		res.Err = cmdErr(CodeUnknown, "no trusted or rejected OPC UA certificate with thumbprint %s", c.Thumbprint)
		return nil
	}
	a.accessChanged = true
	_, err := a.writeAudit("opcua-trust-remove", c.Thumbprint)
	return err
}

func (a *applier) opcuaTrustReject(c *fsmpb.OPCUATrustReject, res *Result) error {
	if e := firstErr(checkCertificateBytes(c.Der), checkID("node id", c.NodeId),
		checkText("application URI", c.ApplicationUri, MaxIDBytes), checkText("subject", c.Subject, MaxIDBytes),
		checkText("reason", c.Reason, MaxIDBytes)); e != nil {
		res.Err = e
		return nil
	}
	key := []byte(Thumbprint(c.Der))
	trusted, err := a.accessBucket(accessOPCUATrusted)
	if err != nil {
		return err
	}
	if trusted.Get(key) != nil {
		return nil // trusted since the node refused it
	}
	rejected, err := a.accessBucket(accessOPCUARejected)
	if err != nil {
		return err
	}
	var rec fsmpb.OPCUARejectedRecord
	ok, err := getRecord(rejected, key, &rec)
	if err != nil {
		return err
	}
	if !ok {
		if atLeast(rejected, MaxOPCUARejected) {
			res.Err = cmdErr(CodeInvalid, "the rejected OPC UA certificates list is full (%d); review it with scadactl opcua trust rejected and remove some", MaxOPCUARejected)
			return nil
		}
		rec = fsmpb.OPCUARejectedRecord{Der: c.Der, FirstUnixNano: a.cmd.StampUnixNano, LogIndex: a.index}
	}
	rec.NodeId, rec.ApplicationUri, rec.Subject, rec.Reason = c.NodeId, c.ApplicationUri, c.Subject, c.Reason
	rec.LastUnixNano = a.cmd.StampUnixNano
	rec.Count++
	if !slices.Contains(rec.Nodes, c.NodeId) {
		rec.Nodes = append(rec.Nodes, c.NodeId)
		slices.Sort(rec.Nodes)
	}
	if err := a.putRecord(rejected, key, &rec); err != nil {
		return fmt.Errorf("store rejected OPC UA certificate %s: %w", key, err)
	}
	a.accessChanged = true
	return nil
}

func (a *applier) opcuaUserSet(c *fsmpb.OPCUAUserSet, res *Result) error {
	e := checkID("OPC UA user name", c.Name)
	if e == nil {
		if err := passhash.Check(c.Hash); err != nil {
			e = cmdErr(CodeInvalid, "OPC UA user %q: password hash: %v", c.Name, err)
		}
	}
	if e != nil {
		res.Err = e
		return nil
	}
	users, err := a.accessBucket(accessOPCUAUsers)
	if err != nil {
		return err
	}
	existed := users.Get([]byte(c.Name)) != nil
	if !existed && atLeast(users, MaxOPCUAUsers) {
		res.Err = cmdErr(CodeInvalid, "there are %d OPC UA users already", MaxOPCUAUsers)
		return nil
	}
	rec := &fsmpb.OPCUAUserRecord{Name: c.Name, Hash: c.Hash, CanWrite: c.CanWrite, Actor: a.cmd.Actor, StampUnixNano: a.cmd.StampUnixNano}
	if err := a.putRecord(users, []byte(c.Name), rec); err != nil {
		return fmt.Errorf("store OPC UA user %q: %w", c.Name, err)
	}
	a.accessChanged = true
	detail := c.Name
	if c.CanWrite {
		detail += " (can write)"
	}
	if existed {
		detail += ", replaced"
	}
	_, err = a.writeAudit("opcua-user-set", detail)
	return err
}

func (a *applier) opcuaUserRemove(c *fsmpb.OPCUAUserRemove, res *Result) error {
	if e := checkID("OPC UA user name", c.Name); e != nil {
		res.Err = e
		return nil
	}
	users, err := a.accessBucket(accessOPCUAUsers)
	if err != nil {
		return err
	}
	if users.Get([]byte(c.Name)) == nil {
		res.Err = cmdErr(CodeUnknown, "no OPC UA user %q", c.Name)
		return nil
	}
	if err := users.Delete([]byte(c.Name)); err != nil {
		return fmt.Errorf("delete OPC UA user %q: %w", c.Name, err)
	}
	a.accessChanged = true
	_, err = a.writeAudit("opcua-user-remove", c.Name)
	return err
}

// readOPCUAAccess reads the OPC UA trust store and users into acc.
func readOPCUAAccess(access *bolt.Bucket, acc *Access) error {
	if b := access.Bucket(accessOPCUATrusted); b != nil {
		err := b.ForEach(func(k, _ []byte) error {
			var rec fsmpb.OPCUATrustedRecord
			if _, err := getRecord(b, k, &rec); err != nil {
				return err
			}
			acc.OPCUATrusted[string(k)] = OPCUATrustedCert{Thumbprint: string(k), DER: rec.Der, Name: rec.Name, Actor: rec.Actor,
				At: time.Unix(0, rec.StampUnixNano).UTC(), LogIndex: rec.LogIndex}
			return nil
		})
		if err != nil {
			return fmt.Errorf("read trusted OPC UA certificates: %w", err)
		}
	}
	if b := access.Bucket(accessOPCUARejected); b != nil {
		err := b.ForEach(func(k, _ []byte) error {
			var rec fsmpb.OPCUARejectedRecord
			if _, err := getRecord(b, k, &rec); err != nil {
				return err
			}
			acc.OPCUARejected[string(k)] = OPCUARejectedCert{Thumbprint: string(k), DER: rec.Der, NodeID: rec.NodeId, Nodes: rec.Nodes,
				ApplicationURI: rec.ApplicationUri, Subject: rec.Subject, Reason: rec.Reason,
				First: time.Unix(0, rec.FirstUnixNano).UTC(), Last: time.Unix(0, rec.LastUnixNano).UTC(), Count: rec.Count, LogIndex: rec.LogIndex}
			return nil
		})
		if err != nil {
			return fmt.Errorf("read rejected OPC UA certificates: %w", err)
		}
	}
	if b := access.Bucket(accessOPCUAUsers); b != nil {
		err := b.ForEach(func(k, _ []byte) error {
			var rec fsmpb.OPCUAUserRecord
			if _, err := getRecord(b, k, &rec); err != nil {
				return err
			}
			acc.OPCUAUsers[rec.Name] = OPCUAUser{Name: rec.Name, Hash: rec.Hash, CanWrite: rec.CanWrite, Actor: rec.Actor, At: time.Unix(0, rec.StampUnixNano).UTC()}
			return nil
		})
		if err != nil {
			return fmt.Errorf("read OPC UA users: %w", err)
		}
	}
	return nil
}
