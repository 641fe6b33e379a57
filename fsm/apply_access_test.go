package fsm

import (
	"crypto/sha256"
	"testing"

	"github.com/scadad/scadad/fsm/fsmpb"
)

func revoke(serial, name string) *fsmpb.Command {
	return &fsmpb.Command{Actor: "boss", Body: &fsmpb.Command_CertRevoke{CertRevoke: &fsmpb.CertRevoke{Serial: serial, Name: name, Reason: "left the company"}}}
}

// A revoked serial is on the in-memory deny list as soon as its entry is
// applied, once only (a second revocation changes nothing, the state's
// digest included), after a reopen too; a malformed serial is refused and
// changes nothing.
func TestCertRevokeDenyList(t *testing.T) {
	f := openTestFSM(t)
	w := newLogWriter(t)
	if f.Access().IsRevoked("1f") {
		t.Fatal("a fresh state revokes 1f")
	}
	for _, bad := range []string{"", "0a", "1F", "zz", "1f:2a", string(make([]byte, MaxSerialHex+1))} {
		if res := applyOne(t, f, w.cmd(revoke(bad, "x"))); res.Err == nil {
			t.Errorf("serial %q accepted", bad)
		}
	}
	if n := len(f.Access().Revoked); n != 0 {
		t.Fatalf("refused revocations left %d entries", n)
	}
	mustOK(t, f, w.cmd(revoke("1f", "alice")))
	if !f.Access().IsRevoked("1f") || f.Access().IsRevoked("2a") {
		t.Fatalf("deny list after revoking 1f: %+v", f.Access().Revoked)
	}
	once := f.Access().Revoked["1f"]
	if once.Name != "alice" || once.Actor != "boss" || once.Reason != "left the company" {
		t.Errorf("revocation record %+v", once)
	}
	mustOK(t, f, w.cmd(revoke("1f", "alice again")))
	if again := f.Access().Revoked["1f"]; again != once {
		t.Errorf("a second revocation replaced the first: %+v, was %+v", again, once)
	}
	entries, err := f.Audit(0, 100)
	if err != nil {
		t.Fatal(err)
	}
	revokes := 0
	for _, e := range entries {
		if e.Kind == "cert-revoke" {
			revokes++
		}
	}
	if revokes != 1 {
		t.Errorf("%d cert-revoke audit entries, want 1", revokes)
	}
	path := f.Path()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g := openTestFSMAt(t, path)
	defer g.Close()
	if !g.Access().IsRevoked("1f") || len(g.Access().RevokedList()) != 1 {
		t.Errorf("deny list after reopen: %+v", g.Access().Revoked)
	}
}

// A created token is found by its hash at once, once only (a second of the
// same name is refused), until it is revoked; a malformed one is refused.
func TestTokenCreateAndRevoke(t *testing.T) {
	f := openTestFSM(t)
	w := newLogWriter(t)
	sum := sha256.Sum256([]byte("scadad_secret"))
	mk := func(name string, hash []byte, targets ...string) *fsmpb.Command {
		return &fsmpb.Command{Actor: "boss", Body: &fsmpb.Command_TokenCreate{TokenCreate: &fsmpb.TokenCreate{Name: name, Sha256: hash, Targets: targets}}}
	}
	if res := applyOne(t, f, w.cmd(mk("feed", sum[:5], "sink"))); res.Err == nil {
		t.Error("a 5-byte hash was accepted")
	}
	mustOK(t, f, w.cmd(mk("feed", sum[:], "sink")))
	tok, ok := f.Access().Token(sum)
	if !ok || tok.Name != "feed" || len(tok.Targets) != 1 || tok.Targets[0] != "sink" || tok.Actor != "boss" {
		t.Fatalf("token after create: %+v %v", tok, ok)
	}
	if res := applyOne(t, f, w.cmd(mk("feed", sum[:]))); res.Err == nil {
		t.Error("a second token named feed was accepted")
	}
	mustOK(t, f, w.cmd(&fsmpb.Command{Body: &fsmpb.Command_TokenRevoke{TokenRevoke: &fsmpb.TokenRevoke{Name: "feed"}}}))
	if _, ok := f.Access().Token(sum); ok {
		t.Error("a revoked token is still known")
	}
	if res := applyOne(t, f, w.cmd(&fsmpb.Command{Body: &fsmpb.Command_TokenRevoke{TokenRevoke: &fsmpb.TokenRevoke{Name: "feed"}}})); res.Err == nil {
		t.Error("revoking a token that is gone succeeded")
	}
}
