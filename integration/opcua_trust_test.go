package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/opcua"
	"github.com/scadad/scadad/uasec"
)

// opcuaClientCert makes a client application certificate with scadactl.
func opcuaClientCert(t *testing.T, c *testcluster.Cluster, uri, name string) (certFile string, cert []byte, opts uasec.ClientOptions) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	if out, errOut, code, err := c.Ctl(ctx, nil, "opcua", "client-cert", "--uri", uri, "--dir", dir, "--name", name); err != nil || code != 0 {
		t.Fatalf("scadactl opcua client-cert: %v exit %d\n%s%s", err, code, out, errOut)
	}
	certFile = filepath.Join(dir, name+".der")
	cert, key, err := uasec.LoadClientIdentity(certFile, filepath.Join(dir, name+".key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return certFile, cert, uasec.ClientOptions{SecurityPolicy: "Basic256Sha256", SecurityMode: "SignAndEncrypt", Certificate: cert, PrivateKey: key, Timeout: 3 * time.Second}
}

// deploySecureOPCUASite deploys a site whose OPC UA server takes
// Basic256Sha256 SignAndEncrypt only, with no anonymous users.
func deploySecureOPCUASite(t *testing.T, c *testcluster.Cluster, sim *testcluster.Sim) {
	t.Helper()
	site := testcluster.SiteConfigGateway("secure", sim.Addr, map[string]string{"sink": "http://127.0.0.1:9/x"}, 5)
	secure := "  security: [{policy: Basic256Sha256, mode: SignAndEncrypt}]\n  identities: {anonymous: false}\n"
	changed := bytes.Replace(site, []byte("  security: [{policy: None, mode: None}]\n  identities: {anonymous: true, anonymous_can_write: true}\n"), []byte(secure), 1)
	if bytes.Equal(changed, site) {
		t.Fatal("site config template changed: no security and identities lines to replace")
	}
	deploySite(t, c, changed)
}

// TestOPCUAManyRefusedClientsCostBoundedReports: a node refusing many
// distinct client certificates proposes a bounded number of them to the
// replicated rejected list (16 at once, then one per 5 s) and warns about
// the rest at most once a minute. Before, every refusal was a proposal
// (the list filled to its 100) and, once the list was full, a warning.
func TestOPCUAManyRefusedClientsCostBoundedReports(t *testing.T) {
	sim, c, active, standby := opcuaPair(t)
	deploySecureOPCUASite(t, c, sim)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const strangers = 80
	dir := t.TempDir()
	began := time.Now()
	for i := range strangers {
		certFile, keyFile := filepath.Join(dir, fmt.Sprint(i, ".der")), filepath.Join(dir, fmt.Sprint(i, ".key.pem"))
		if err := opcua.WriteSelfSigned(certFile, keyFile, fmt.Sprintf("urn:test:stranger-%d", i), ""); err != nil {
			t.Fatal(err)
		}
		cert, key, err := uasec.LoadClientIdentity(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		o := uasec.ClientOptions{SecurityPolicy: "Basic256Sha256", SecurityMode: "SignAndEncrypt", Certificate: cert, PrivateKey: key, Timeout: 3 * time.Second}
		if _, err := opcua.ReadServiceLevel(ctx, active.OPCUA, o); err == nil {
			t.Fatalf("stranger %d read the ServiceLevel: an untrusted certificate was accepted", i)
		}
	}
	elapsed := time.Since(began)
	bound := 16 + int(elapsed/(5*time.Second)) + 1
	proposed := func() int {
		n := 0
		for _, r := range []string{"recorded", "propose_failed"} {
			v, _ := strconv.ParseFloat(metricLine(active, `scadad_opcua_trust_rejections_total{result="`+r+`"}`), 64)
			n += int(v)
		}
		return n
	}
	testwait.ForDetail(t, 20*time.Second, "the Active's reports proposed and listed", func() (bool, string) {
		listed := len(rejectedList(c, standby))
		return proposed() >= 16 && listed >= 16, fmt.Sprintf("%d proposed, %d listed", proposed(), listed)
	})
	limited, _ := strconv.ParseFloat(metricLine(active, `scadad_opcua_trust_rejections_total{result="rate_limited"}`), 64)
	// Most of the rest are rate-limited (a connection that failed before
	// its certificate was checked, under load, is no refusal).
	if got := proposed(); got > bound || int(limited) < strangers/2 {
		t.Errorf("%d certificates refused in %s: %d proposed, %v rate-limited; want at most %d proposed and most of the rest rate-limited", strangers, elapsed.Round(time.Second), got, limited, bound)
	}
	if listed := rejectedList(c, standby); len(listed) > bound {
		t.Errorf("the rejected list holds %d certificates after %s; want at most %d", len(listed), elapsed.Round(time.Second), bound)
	}
	log, err := os.ReadFile(active.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	warned := strings.Count(string(log), "are not on the replicated rejected list")
	if maxWarned := int(elapsed/time.Minute) + 1; warned < 1 || warned > maxWarned {
		t.Errorf("%d warnings about refusals left off the list in %s; want 1 to %d", warned, elapsed.Round(time.Second), maxWarned)
	}
	t.Logf("%d strangers refused in %s: %d proposed, %v rate-limited, %d warnings", strangers, elapsed.Round(time.Millisecond), proposed(), limited, warned)
}

// ctlOK runs scadactl through nodes and fails the test unless it exits 0.
func ctlOK(t *testing.T, c *testcluster.Cluster, nodes []*testcluster.Node, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, errOut, code, err := c.Ctl(ctx, nodes, args...)
	if err != nil || code != 0 {
		t.Fatalf("scadactl %s: %v exit %d\n%s%s", strings.Join(args, " "), err, code, out, errOut)
	}
	return out
}

func rejectedList(c *testcluster.Cluster, n *testcluster.Node) []*controlpb.OPCUARejectedCertificate {
	var got []*controlpb.OPCUARejectedCertificate
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.CtlJSON(ctx, []*testcluster.Node{n}, &got, "opcua", "trust", "rejected"); err != nil {
		return nil
	}
	return got
}

func rejectedBy(list []*controlpb.OPCUARejectedCertificate, thumb, node string) bool {
	for _, r := range list {
		if r.Thumbprint == thumb && strings.Contains(strings.Join(r.Nodes, ","), node) {
			return true
		}
	}
	return false
}

// TestOPCUATrustStoreAndUsersAreReplicated: on real processes, a
// SignAndEncrypt-only site with no users in its site config and no file
// copied by hand. The HMI's certificate, refused first, is on the
// replicated rejected list from every node; trusted once with scadactl
// opcua trust add through the Standby, it opens secure channels on both
// nodes. Users set once with scadactl opcua users set log in on both
// nodes, with their rights; a wrong password and a stranger's certificate
// are refused. No password is in the state file, a snapshot or a log.
// After a SIGKILL of the Active the survivor trusts and refuses the same
// certificates and users; a certificate removed or a user removed there
// is refused at its next channel or login.
func TestOPCUATrustStoreAndUsersAreReplicated(t *testing.T) {
	sim, c, active, standby := opcuaPair(t, "-change", "100ms")
	both := []*testcluster.Node{active, standby}
	hmiFile, hmiCert, hmi := opcuaClientCert(t, c, "urn:test:hmi", "hmi")
	_, strangerCert, stranger := opcuaClientCert(t, c, "urn:test:stranger", "stranger")
	hmiThumb, strangerThumb := uasec.Thumbprint(hmiCert), uasec.Thumbprint(strangerCert)

	const opSecret, viewSecret = "op-Secret-7f3a9c", "view-Secret-2b8e1d"
	secrets := t.TempDir()
	for user, pw := range map[string]string{"operator": opSecret, "viewer": viewSecret} {
		if err := os.WriteFile(filepath.Join(secrets, user+".pass"), []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctlOK(t, c, []*testcluster.Node{standby}, "opcua", "users", "set", "operator", "--password-file", filepath.Join(secrets, "operator.pass"), "--can-write")
	ctlOK(t, c, []*testcluster.Node{active}, "opcua", "users", "set", "viewer", "--password-file", filepath.Join(secrets, "viewer.pass"))

	// The per-node trusted folder of v0.1.0, as an operator who did not
	// import it left it: no longer read, and each node says so (naming
	// the import command) when its OPC UA server starts.
	hmiDER, err := os.ReadFile(hmiFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range both {
		trusted := filepath.Join(n.Dir, "data", "opcua", "pki", "trusted")
		if err := os.MkdirAll(trusted, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(trusted, "hmi.der"), hmiDER, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	deploySecureOPCUASite(t, c, sim)
	for _, n := range both {
		testwait.For(t, 20*time.Second, n.ID+" warning of its trusted folder, naming scadactl opcua trust import", func() bool {
			log, _ := os.ReadFile(n.LogPath())
			return bytes.Contains(log, []byte("trusted folder is no longer read")) && bytes.Contains(log, []byte("scadactl opcua trust import "+filepath.Join(n.Dir, "data", "opcua", "pki", "trusted")))
		})
	}

	operator := hmi
	operator.Username, operator.Password = "operator", opSecret
	viewer := hmi
	viewer.Username, viewer.Password = "viewer", viewSecret
	level := func(n *testcluster.Node, o uasec.ClientOptions) (byte, error) {
		return opcua.ReadServiceLevel(context.Background(), n.OPCUA, o)
	}

	// Refused on each node, its certificate in the folder notwithstanding,
	// and on the replicated rejected list, read from the other node.
	for _, n := range both {
		other := otherVoter(t, c, n)
		testwait.For(t, 20*time.Second, n.ID+" refusing the HMI and "+other.ID+" listing the refusal", func() bool {
			_, err := level(n, operator)
			return err != nil && rejectedBy(rejectedList(c, other), hmiThumb, n.ID)
		})
	}
	ctlOK(t, c, []*testcluster.Node{standby}, "opcua", "trust", "add", hmiFile, "--name", "hmi-1")
	testwait.For(t, 20*time.Second, "ServiceLevel 250 on the Active and 240 on the Standby over SignAndEncrypt as operator, once trusted", func() bool {
		a, errA := level(active, operator)
		s, errS := level(standby, operator)
		return errA == nil && errS == nil && a == 250 && s == 240
	})
	if l := rejectedList(c, active); rejectedBy(l, hmiThumb, active.ID) || rejectedBy(l, hmiThumb, standby.ID) {
		t.Errorf("the trusted HMI is still on the rejected list: %+v", l)
	}

	if _, err := level(active, viewer); err != nil {
		t.Fatalf("the viewer cannot log in on the Active: %v", err)
	}
	wrong := operator
	wrong.Password = "guess"
	unknown := operator
	unknown.Username = "nobody"
	for _, n := range both {
		if _, err := level(n, wrong); err == nil {
			t.Fatalf("%s accepted a wrong password", n.ID)
		}
		if _, err := level(n, unknown); err == nil {
			t.Fatalf("%s accepted an unknown user", n.ID)
		}
	}
	strangerOp := stranger
	strangerOp.Username, strangerOp.Password = "operator", opSecret
	if _, err := level(active, strangerOp); err == nil {
		t.Fatal("the Active accepted a stranger's certificate")
	}
	// The stranger tries again, as an HMI does: a report a node left off
	// the list (rate-limited, a failed proposal) is made at a later refusal.
	testwait.For(t, 20*time.Second, "the stranger on the rejected list", func() bool {
		if rejectedBy(rejectedList(c, standby), strangerThumb, active.ID) {
			return true
		}
		_, _ = level(active, strangerOp)
		return false
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ac, err := uasec.Dial(ctx, active.OPCUA, operator)
	if err != nil {
		t.Fatal(err)
	}
	defer operator.Close(ac)
	vc, err := uasec.Dial(ctx, active.OPCUA, viewer)
	if err != nil {
		t.Fatal(err)
	}
	defer viewer.Close(vc)
	if st := writeDouble(t, vc, siteNode(t, ac, "Pump1.SpeedSP"), 1); st != ua.StatusBadUserAccessDenied {
		t.Fatalf("the viewer's write: %v, want BadUserAccessDenied", st)
	}
	if st := writeDouble(t, ac, siteNode(t, ac, "Pump1.SpeedSP"), 42); st != ua.StatusOK {
		t.Fatalf("the operator's write on the Active: %v", st)
	}

	// No password anywhere a node keeps data: state file, a snapshot,
	// logs (the hash only).
	snap := filepath.Join(t.TempDir(), "backup.snap")
	ctlOK(t, c, []*testcluster.Node{active}, "snapshot", "save", snap)
	places := []string{snap}
	for _, n := range both {
		places = append(places, n.LogPath())
		state, _ := filepath.Glob(filepath.Join(n.Dir, "data", "*"))
		places = append(places, state...)
	}
	sawHash := false
	for _, p := range places {
		info, err := os.Stat(p)
		if err != nil || info.IsDir() {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, pw := range []string{opSecret, viewSecret} {
			if bytes.Contains(data, []byte(pw)) {
				t.Errorf("%s holds the password %q in clear", p, pw)
			}
		}
		sawHash = sawHash || bytes.Contains(data, []byte("$argon2id$v=19$"))
	}
	if !sawHash {
		t.Errorf("no argon2id hash found in %v: the users are not where this test looks", places)
	}

	c.Kill(active)
	testwait.For(t, 20*time.Second, "the survivor's ServiceLevel 250 over SignAndEncrypt as operator", func() bool {
		lvl, err := level(standby, operator)
		return err == nil && lvl == 250
	})
	if _, err := level(standby, viewer); err != nil {
		t.Fatalf("the viewer cannot log in on the survivor: %v", err)
	}
	if _, err := level(standby, wrong); err == nil {
		t.Fatal("the survivor accepted a wrong password")
	}
	if _, err := level(standby, strangerOp); err == nil {
		t.Fatal("the survivor accepted the stranger's certificate")
	}
	var trusted []*controlpb.OPCUACertificate
	ctlJSON(t, c, []*testcluster.Node{standby}, &trusted, "opcua", "trust", "list")
	if len(trusted) != 1 || trusted[0].Thumbprint != hmiThumb || trusted[0].Name != "hmi-1" || trusted[0].ApplicationUri != "urn:test:hmi" {
		t.Fatalf("the survivor's trust list: %+v", trusted)
	}
	if l := rejectedList(c, standby); !rejectedBy(l, strangerThumb, active.ID) {
		t.Fatalf("the survivor's rejected list lost the stranger: %+v", l)
	}

	ctlOK(t, c, []*testcluster.Node{standby}, "opcua", "users", "remove", "viewer")
	if _, err := level(standby, viewer); err == nil {
		t.Fatal("a removed user still logs in")
	}
	ctlOK(t, c, []*testcluster.Node{standby}, "opcua", "trust", "remove", strings.ToLower(hmiThumb))
	if _, err := level(standby, operator); err == nil {
		t.Fatal("a removed certificate still opens a secure channel")
	}
}
