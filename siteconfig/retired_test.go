package siteconfig

import (
	"strings"
	"testing"
)

// A user with a per-node password file (read in v0.1.0 only) is named,
// with the command that moves it; a site without one names nothing.
func TestRetiredNamesPasswordFileUsers(t *testing.T) {
	s := &Site{}
	if r := s.Retired(); r != nil {
		t.Fatalf("a site without users: %q; want nothing", r)
	}
	s.OPCUA.Identities.Users = []ServerUser{{Username: "op", PasswordFile: "/etc/scadad/op.pass", CanWrite: true}, {Username: "view", PasswordFile: "/v"}}
	r := s.Retired()
	if len(r) != 2 {
		t.Fatalf("%q; want one line per user", r)
	}
	for _, want := range []string{"opcua.identities.users[0] (\"op\")", "no longer read", "scadactl opcua users set op --password-file /etc/scadad/op.pass --can-write"} {
		if !strings.Contains(r[0], want) {
			t.Errorf("%q does not say %q", r[0], want)
		}
	}
	if !strings.Contains(r[1], "scadactl opcua users set view --password-file /v,") {
		t.Errorf("%q: want the command without --can-write", r[1])
	}
}
