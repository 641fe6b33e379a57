package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/siteconfig"
)

// A certificate left in the per-node trusted folder, and a user with a
// per-node password file in the deployed site config, are warned of with
// the command that moves each; an empty or absent folder and a site
// without such users say nothing.
func TestRetiredOPCUAFilesAreWarnedOf(t *testing.T) {
	var out bytes.Buffer
	log := zerolog.New(&out)
	dir := filepath.Join(t.TempDir(), "trusted")
	warnRetiredTrustFolder(log, dir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	warnRetiredTrustFolder(log, dir)
	warnRetiredSiteFields(log, &siteconfig.Site{})
	if out.Len() != 0 {
		t.Fatalf("logged %q with nothing to warn of", out.String())
	}
	if err := os.WriteFile(filepath.Join(dir, "hmi [ab12].der"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	warnRetiredTrustFolder(log, dir)
	for _, want := range []string{`"level":"warn"`, "no longer read", "hmi [ab12].der", "scadactl opcua trust import " + dir} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("trusted folder warning %q does not say %q", out.String(), want)
		}
	}
	out.Reset()
	site := &siteconfig.Site{}
	site.OPCUA.Identities.Users = []siteconfig.ServerUser{{Username: "operator", PasswordFile: "/etc/scadad/op.pass", CanWrite: true}}
	warnRetiredSiteFields(log, site)
	for _, want := range []string{`"level":"warn"`, "no longer read", "scadactl opcua users set operator --password-file /etc/scadad/op.pass --can-write"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("password file warning %q does not say %q", out.String(), want)
		}
	}
}
