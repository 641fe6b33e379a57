package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/opcua"
)

// TestOPCUAClientConnection deploys a site with attributes on an OPC UA
// client connection and follows them through real processes: the Active's
// client session reads the upstream server's nodes, the values appear in
// the Active's own address space, and a device write goes upstream. The
// upstream is another scadad (a one-node site serving a gateway
// simulator's Pump1; no other OPC UA server implementation is available
// here), so a value travels simulator → upstream scadad → OPC UA over TCP
// → the site's Active, and a write the other way to the upstream's
// simulator.
func TestOPCUAClientConnection(t *testing.T) {
	upSim := startSim(t, "-change", "100ms")
	up := newCluster(t, testcluster.Options{Mode: "strict", Voters: 1, Witness: false, OPCUA: true, LogLevel: "info"})
	start(t, up)
	upNode := waitOneActive(t, up, 20*time.Second)
	deploySite(t, up, testcluster.SiteConfigGateway("upstream", upSim.Addr, nil, 5))
	testwait.For(t, 20*time.Second, "the upstream's ServiceLevel 250", func() bool { return serviceLevel(upNode.OPCUA) == 250 })

	sim := startSim(t, "-change", "100ms")
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, OPCUA: true, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)

	deploySite(t, c, mirrorSite(sim.Addr, upNode.OPCUA, ""))
	testwait.For(t, 20*time.Second, "ServiceLevel 250 on the Active", func() bool { return serviceLevel(active.OPCUA) == 250 })

	ac := uaClient(t, active.OPCUA)
	mirror := siteNode(t, ac, "Mirror.Speed")
	waitGoodChanging(t, ac, mirror, 30*time.Second, "a good, changing Mirror.Speed read through the client connection")

	// scadactl status lists both connections, up.
	testwait.For(t, 20*time.Second, "scadactl status: gw (mxaccess) and upstream (opcua) up", func() bool {
		return connUp(status(t, c, active), "gw", "mxaccess") && connUp(status(t, c, active), "upstream", "opcua")
	})

	before, err := upSim.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st := writeDouble(t, ac, siteNode(t, ac, "Mirror.SpeedSP"), 42); st != ua.StatusOK {
		t.Fatalf("the Active refused a write to an attribute on the client connection: %v", st)
	}
	testwait.For(t, 10*time.Second, "the write to Mirror.SpeedSP at the upstream's gateway as Pump1.SpeedSP", func() bool {
		after, err := upSim.Stats()
		return err == nil && after.Commands["Write"]+after.Commands["write"] > before.Commands["Write"]+before.Commands["write"]
	})

	// Mirror.Speed is read-only: the write gate refuses it before anything
	// goes upstream.
	if st := writeDouble(t, ac, mirror, 1); st == ua.StatusOK {
		t.Fatal("a write to a read-only attribute was accepted")
	}

	// SIGKILL of the upstream: the attribute turns Bad on the Active, and
	// comes back once the upstream is up again.
	up.Kill(upNode)
	testwait.For(t, 15*time.Second, "Mirror.Speed Bad after the upstream was killed", func() bool {
		dv, err := readValue(ac, mirror)
		return err == nil && dv.Status != ua.StatusOK
	})

	testwait.For(t, 15*time.Second, "scadactl status: upstream down, with the reason", func() bool {
		for _, cs := range status(t, c, active).Connections {
			if cs.Name == "upstream" {
				return !cs.Up && cs.Detail != ""
			}
		}
		return false
	})

	start(t, up, upNode)
	waitGoodChanging(t, ac, mirror, 30*time.Second, "Mirror.Speed good and changing again after the upstream restarted")
}

// mirrorSite is the test site with an OPC UA client connection "upstream"
// to endpoint (its extra option lines, indented six spaces, added) and an
// instance Mirror reading the upstream scadad's Pump1 through it.
func mirrorSite(gateway, endpoint, extra string) []byte {
	site := string(testcluster.SiteConfigGateway("uaclient", gateway, map[string]string{"sink": "http://127.0.0.1:9/x"}, 5))
	return []byte(strings.Replace(site, "instances:\n", `  - name: upstream
    kind: opcua
    opcua:
      endpoint: `+endpoint+`
`+extra+`      publishing_interval: 100ms
      backoff_floor: 100ms
      backoff_max: 1s
instances:
  - name: Mirror
    connection: upstream
    attributes:
      - {name: Speed, type: double, tag: "nsu=urn:test:scadad;s=Pump1.Speed"}
      - {name: SpeedSP, type: double, tag: "nsu=urn:test:scadad;s=Pump1.SpeedSP", writable: true}
`, 1))
}

// connUp reports whether st lists connection name of kind as up.
func connUp(st *controlpb.StatusResponse, name, kind string) bool {
	for _, cs := range st.Connections {
		if cs.Name == name {
			return cs.Kind == kind && cs.Up
		}
	}
	return false
}

// TestOPCUAClientConnectionOverSignAndEncrypt: the same path with the
// upstream offering only Basic256Sha256 SignAndEncrypt and user names; the
// site's connection presents a client certificate (trusted upstream) and a
// user that may write, and checks the upstream's own certificate (the one
// it made on first start). Values come through and a write goes upstream.
func TestOPCUAClientConnectionOverSignAndEncrypt(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, passFile := filepath.Join(dir, "site.der"), filepath.Join(dir, "site.key.pem"), filepath.Join(dir, "site.pass")
	if err := opcua.WriteSelfSigned(certFile, keyFile, "urn:test:site-client", "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(passFile, []byte("feed-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	upSim := startSim(t, "-change", "100ms")
	up := newCluster(t, testcluster.Options{Mode: "strict", Voters: 1, Witness: false, OPCUA: true, LogLevel: "info"})
	start(t, up)
	upNode := waitOneActive(t, up, 20*time.Second)
	ctlOK(t, up, nil, "opcua", "trust", "add", certFile, "--name", "site-client")
	ctlOK(t, up, nil, "opcua", "users", "set", "site", "--password-file", passFile, "--can-write")
	upSite := testcluster.SiteConfigGateway("upstream", upSim.Addr, nil, 5)
	secured := bytes.Replace(upSite, []byte("  security: [{policy: None, mode: None}]\n  identities: {anonymous: true, anonymous_can_write: true}\n"),
		[]byte("  security: [{policy: Basic256Sha256, mode: SignAndEncrypt}]\n  identities: {anonymous: false}\n"), 1)
	if bytes.Equal(secured, upSite) {
		t.Fatal("site config template changed: no security and identities lines to replace")
	}
	deploySite(t, up, secured)

	sim := startSim(t, "-change", "100ms")
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, OPCUA: true, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	deploySite(t, c, mirrorSite(sim.Addr, upNode.OPCUA, `      security_policy: Basic256Sha256
      security_mode: SignAndEncrypt
      certificate_file: `+certFile+`
      private_key_file: `+keyFile+`
      identity: {type: username, username: site, password_file: `+passFile+`}
      server_certificate_file: `+filepath.Join(upNode.Dir, "data", "opcua", "pki", "own", "cert.der")+`
`))
	testwait.For(t, 20*time.Second, "ServiceLevel 250 on the Active", func() bool { return serviceLevel(active.OPCUA) == 250 })

	ac := uaClient(t, active.OPCUA)
	mirror := siteNode(t, ac, "Mirror.Speed")
	waitGoodChanging(t, ac, mirror, 30*time.Second, "a good, changing Mirror.Speed read over SignAndEncrypt")
	before, err := upSim.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st := writeDouble(t, ac, siteNode(t, ac, "Mirror.SpeedSP"), 42); st != ua.StatusOK {
		t.Fatalf("a write through the secure client connection: %v", st)
	}
	testwait.For(t, 10*time.Second, "the write at the upstream's gateway", func() bool {
		after, err := upSim.Stats()
		return err == nil && after.Commands["Write"]+after.Commands["write"] > before.Commands["Write"]+before.Commands["write"]
	})

	if rejected, _ := filepath.Glob(filepath.Join(upNode.Dir, "data", "opcua", "pki", "rejected", "*")); len(rejected) != 0 {
		t.Fatalf("the upstream refused a certificate: %v", rejected)
	}
}
