package fsm

import (
	"crypto/rand"
	"fmt"
	"strings"
	"testing"

	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/passhash"
)

func trustAdd(der []byte, name string) *fsmpb.Command {
	return &fsmpb.Command{Actor: "alice", Body: &fsmpb.Command_OpcuaTrustAdd{OpcuaTrustAdd: &fsmpb.OPCUATrustAdd{Der: der, Name: name}}}
}

func trustRemove(thumb string) *fsmpb.Command {
	return &fsmpb.Command{Actor: "alice", Body: &fsmpb.Command_OpcuaTrustRemove{OpcuaTrustRemove: &fsmpb.OPCUATrustRemove{Thumbprint: thumb}}}
}

func trustReject(der []byte, node string) *fsmpb.Command {
	return &fsmpb.Command{Actor: node, Body: &fsmpb.Command_OpcuaTrustReject{OpcuaTrustReject: &fsmpb.OPCUATrustReject{Der: der, NodeId: node, ApplicationUri: "urn:hmi", Subject: "hmi", Reason: "not trusted"}}}
}

// A rejected certificate is kept once per thumbprint with every node that
// refused it; trusting it takes it off the rejected list and is found on
// reopen; a rejection of a trusted certificate records nothing; removing
// takes it off both lists; the rejected list is bounded.
func TestOPCUATrustStore(t *testing.T) {
	f := openTestFSM(t)
	w := newLogWriter(t)
	hmi := []byte("not parsed by the FSM: any bytes are a certificate to it")
	thumb := Thumbprint(hmi)
	for _, bad := range []*fsmpb.Command{trustAdd(nil, "x"), trustAdd(make([]byte, MaxCertificateBytes+1), "x"), trustRemove("abc"), trustRemove(strings.ToLower(thumb)), trustReject(hmi, "")} {
		if res := applyOne(t, f, w.cmd(bad)); res.Err == nil {
			t.Errorf("accepted %v", bad)
		}
	}
	mustOK(t, f, w.cmd(trustReject(hmi, "node-b")))
	mustOK(t, f, w.cmd(trustReject(hmi, "node-a")))
	r, ok := f.Access().OPCUARejected[thumb]
	if !ok || r.Count != 2 || r.NodeID != "node-a" || strings.Join(r.Nodes, ",") != "node-a,node-b" || r.ApplicationURI != "urn:hmi" {
		t.Fatalf("rejected after two refusals: %+v %v", r, ok)
	}
	mustOK(t, f, w.cmd(trustAdd(hmi, "hmi")))
	acc := f.Access()
	if c, ok := acc.OPCUATrusted[thumb]; !ok || c.Name != "hmi" || c.Actor != "alice" || string(c.DER) != string(hmi) {
		t.Fatalf("trusted: %+v %v", c, ok)
	}
	if _, ok := acc.OPCUARejected[thumb]; ok {
		t.Fatal("trusting a certificate left it on the rejected list")
	}
	mustOK(t, f, w.cmd(trustReject(hmi, "node-b")))
	if len(f.Access().OPCUARejected) != 0 {
		t.Fatal("a rejection of a trusted certificate was recorded")
	}

	path := f.Path()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g := openTestFSMAt(t, path)
	defer g.Close()
	if l := g.Access().OPCUATrustedList(); len(l) != 1 || l[0].Thumbprint != thumb {
		t.Fatalf("trusted after reopen: %+v", l)
	}
	mustOK(t, g, w.cmd(trustRemove(thumb)))
	if len(g.Access().OPCUATrusted) != 0 {
		t.Fatal("removed certificate still trusted")
	}
	if res := applyOne(t, g, w.cmd(trustRemove(thumb))); res.Err == nil {
		t.Error("removing an unknown thumbprint succeeded")
	}

	for i := range MaxOPCUARejected {
		mustOK(t, g, w.cmd(trustReject(fmt.Appendf(nil, "cert %d", i), "node-a")))
	}
	if res := applyOne(t, g, w.cmd(trustReject([]byte("one too many"), "node-a"))); res.Err == nil {
		t.Error("the rejected list grew past its bound")
	}
	mustOK(t, g, w.cmd(trustReject([]byte("cert 0"), "node-b"))) // a known one still counts
	if n := len(g.Access().OPCUARejected); n != MaxOPCUARejected {
		t.Errorf("%d rejected, want %d", n, MaxOPCUARejected)
	}
}

// A user is stored with its hash only, replaced by a second set, removed;
// anything but a bounded argon2id hash is refused (a password in the hash
// field first of all).
func TestOPCUAUsers(t *testing.T) {
	f := openTestFSM(t)
	w := newLogWriter(t)
	set := func(name, hash string, write bool) *fsmpb.Command {
		return &fsmpb.Command{Actor: "root", Body: &fsmpb.Command_OpcuaUserSet{OpcuaUserSet: &fsmpb.OPCUAUserSet{Name: name, Hash: hash, CanWrite: write}}}
	}
	h, err := passhash.Hash([]byte("op-secret"), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []*fsmpb.Command{set("operator", "op-secret", true), set("", h, false), set("operator", strings.Replace(h, "m=19456", "m=99999999", 1), true)} {
		if res := applyOne(t, f, w.cmd(bad)); res.Err == nil {
			t.Errorf("accepted %v", bad)
		}
	}
	mustOK(t, f, w.cmd(set("operator", h, false)))
	mustOK(t, f, w.cmd(set("operator", h, true)))
	u, ok := f.Access().OPCUAUsers["operator"]
	if !ok || !u.CanWrite || u.Hash != h || len(f.Access().OPCUAUserList()) != 1 {
		t.Fatalf("user: %+v %v", u, ok)
	}
	if ok, err := passhash.Verify(u.Hash, []byte("op-secret")); !ok || err != nil {
		t.Fatalf("stored hash does not verify: %v %v", ok, err)
	}
	rm := &fsmpb.Command{Body: &fsmpb.Command_OpcuaUserRemove{OpcuaUserRemove: &fsmpb.OPCUAUserRemove{Name: "operator"}}}
	mustOK(t, f, w.cmd(rm))
	if len(f.Access().OPCUAUsers) != 0 {
		t.Fatal("removed user still there")
	}
	if res := applyOne(t, f, w.cmd(rm)); res.Err == nil {
		t.Error("removing a user that is gone succeeded")
	}
}
