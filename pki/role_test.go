package pki

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func readLeaf(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// Init's clients are admins, Issue writes the role asked for into the
// certificate, node certificates carry none, and every certificate signed
// lands in the issuance record with its serial.
func TestRolesAndIssuanceRecord(t *testing.T) {
	dir := t.TempDir()
	if err := Init(dir, "plant1", []string{"node-a"}, []string{"operator"}, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := Issue(dir, "watcher", ClientUsage, RoleViewer, time.Hour, false); err != nil {
		t.Fatal(err)
	}
	if err := Issue(dir, "feed", ClientUsage, RoleProducer, time.Hour, false); err != nil {
		t.Fatal(err)
	}
	want := map[string]Role{"node-a": RoleNone, "operator": RoleAdmin, "watcher": RoleViewer, "feed": RoleProducer}
	serials := map[string]string{}
	for name, role := range want {
		cert := readLeaf(t, filepath.Join(dir, name+".crt"))
		got, err := CertRole(cert)
		if err != nil || got != role {
			t.Errorf("%s: role %q, %v; want %q", name, got, err, role)
		}
		if IsNodeCert(cert) != (name == "node-a") {
			t.Errorf("%s: IsNodeCert = %v", name, IsNodeCert(cert))
		}
		serials[name] = SerialHex(cert)
	}
	recs, err := ReadIssued(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 {
		t.Fatalf("issuance record has %d lines, want 4: %+v", len(recs), recs)
	}
	for _, r := range recs {
		if serials[r.Name] != r.Serial || want[r.Name] != r.Role {
			t.Errorf("record %+v: want serial %s role %q", r, serials[r.Name], want[r.Name])
		}
	}

	if _, err := (&CA{}).Issue(LeafSpec{Name: "x", Usage: ClientUsage, Role: "root"}); err == nil {
		t.Error("a role that does not exist was issued")
	}
	if _, err := ParseRole("superuser"); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("ParseRole(superuser) = %v, want ErrInvalidInput", err)
	}
	two := &x509.Certificate{}
	two.Subject.OrganizationalUnit = []string{"scadad-role:viewer", "scadad-role:admin"}
	if _, err := CertRole(two); err == nil {
		t.Error("a certificate with two roles was read as one")
	}
	if s, err := ParseSerial("0A:1b:FF"); err != nil || s != "a1bff" {
		t.Errorf("ParseSerial = %q, %v", s, err)
	}
	if _, err := ParseSerial("zz"); err == nil {
		t.Error("ParseSerial accepted zz")
	}
}

// A producer certificate issued with targets may enqueue to those alone;
// one without targets to any.
func TestCertTargets(t *testing.T) {
	dir := t.TempDir()
	if err := Init(dir, "plant1", []string{"node-a"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := IssueLimited(dir, "feed", ClientUsage, RoleProducer, []string{"historian", "erp"}, time.Hour, false); err != nil {
		t.Fatal(err)
	}
	if err := IssueLimited(dir, "any", ClientUsage, RoleProducer, nil, time.Hour, false); err != nil {
		t.Fatal(err)
	}
	feed, anyCert := readLeaf(t, filepath.Join(dir, "feed.crt")), readLeaf(t, filepath.Join(dir, "any.crt"))
	if !CertAllowsTarget(feed, "historian") || !CertAllowsTarget(feed, "erp") || CertAllowsTarget(feed, "mes") {
		t.Errorf("feed limited to %v allows historian %v, erp %v, mes %v", CertTargets(feed), CertAllowsTarget(feed, "historian"), CertAllowsTarget(feed, "erp"), CertAllowsTarget(feed, "mes"))
	}
	if !CertAllowsTarget(anyCert, "mes") {
		t.Error("a certificate without targets was refused a target")
	}
	if err := IssueLimited(dir, "bad", ClientUsage, RoleProducer, []string{"a,b"}, time.Hour, false); err == nil {
		t.Error("a target with a comma was issued")
	}
	if err := IssueLimited(dir, "node-x", NodeUsage, RoleNone, []string{"a"}, time.Hour, false); err == nil {
		t.Error("a node certificate with targets was issued")
	}
}
