package integration

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/lockedbuf"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/opcua"
	"github.com/scadad/scadad/uasec"
)

// TestOPCUASecureEndpointsEndToEnd: a site whose OPC UA endpoints are all
// Basic256Sha256 SignAndEncrypt with user-name logins, on real processes,
// with a client certificate made by scadactl. The client is refused until
// an operator trusts its certificate (found in the rejected folder); the
// peer probe still reaches the secure-only peer (ServiceLevel 250/240, not
// 200); a viewer cannot write, an operator writes on the Active only; a
// None session is refused; after a SIGKILL of the Active the survivor
// serves 250 and live values over the secure channel.
func TestOPCUASecureEndpointsEndToEnd(t *testing.T) {
	sim, c, active, standby := opcuaPair(t, "-change", "100ms")
	secrets := t.TempDir()
	for user, pw := range map[string]string{"operator": "op-secret", "viewer": "view-secret"} {
		if err := os.WriteFile(filepath.Join(secrets, user+".pass"), []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	certDir := t.TempDir()
	if out, errOut, code, err := c.Ctl(ctx, nil, "opcua", "client-cert", "--uri", "urn:test:hmi", "--dir", certDir, "--name", "hmi"); err != nil || code != 0 {
		t.Fatalf("scadactl opcua client-cert: %v exit %d\n%s%s", err, code, out, errOut)
	}
	certFile, keyFile := filepath.Join(certDir, "hmi.der"), filepath.Join(certDir, "hmi.key.pem")
	cert, key, err := uasec.LoadClientIdentity(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}

	site := testcluster.SiteConfigGateway("secure", sim.Addr, map[string]string{"sink": "http://127.0.0.1:9/x"}, 5)
	secure := "  security: [{policy: Basic256Sha256, mode: SignAndEncrypt}]\n  identities: {anonymous: false}\n"
	ctlOK(t, c, nil, "opcua", "users", "set", "operator", "--password-file", filepath.Join(secrets, "operator.pass"), "--can-write")
	ctlOK(t, c, nil, "opcua", "users", "set", "viewer", "--password-file", filepath.Join(secrets, "viewer.pass"))
	changed := bytes.Replace(site, []byte("  security: [{policy: None, mode: None}]\n  identities: {anonymous: true, anonymous_can_write: true}\n"), []byte(secure), 1)
	if bytes.Equal(changed, site) {
		t.Fatal("site config template changed: no security and identities lines to replace")
	}
	deploySite(t, c, changed)
	deployed := time.Now()

	operator := uasec.ClientOptions{SecurityPolicy: "Basic256Sha256", SecurityMode: "SignAndEncrypt", Certificate: cert, PrivateKey: key,
		Username: "operator", Password: "op-secret", Timeout: 3 * time.Second}
	viewer := operator
	viewer.Username, viewer.Password = "viewer", "view-secret"
	level := func(n *testcluster.Node, o uasec.ClientOptions) (byte, error) {
		return opcua.ReadServiceLevel(context.Background(), n.OPCUA, o)
	}

	// Untrusted first, on every node; each keeps the certificate for the
	// operator, who trusts it once for the site.
	var rejectedCopy string
	for _, n := range []*testcluster.Node{active, standby} {
		pki := filepath.Join(n.Dir, "data", "opcua", "pki")
		// Refused at the door (an Error message BadCertificateUntrusted,
		// which gopcua's client reports as EOF), and kept for the operator.
		var rejected []string
		testwait.For(t, 20*time.Second, n.ID+" refusing the unknown client certificate and keeping it", func() bool {
			_, refusal := level(n, operator)
			rejected, _ = filepath.Glob(filepath.Join(pki, "rejected", "*.der"))
			return refusal != nil && len(rejected) == 1
		})

		rejected, err := filepath.Glob(filepath.Join(pki, "rejected", "*.der"))
		if err != nil || len(rejected) != 1 {
			t.Fatalf("%s's rejected folder: %v %v", n.ID, rejected, err)
		}
		rejectedCopy = rejected[0]
		if _, err := os.Stat(filepath.Join(pki, "own", "cert.der")); err != nil {
			t.Fatalf("%s keeps no own certificate: %v", n.ID, err)
		}
	}

	ctlOK(t, c, nil, "opcua", "trust", "add", rejectedCopy, "--name", "hmi")

	// 240 on the Standby needs its peer's verdict that it is reachable:
	// the probe must get through to a secure-only endpoint.
	testwait.For(t, 20*time.Second, "ServiceLevel 250 on the Active and 240 on the Standby, read over SignAndEncrypt", func() bool {
		a, errA := level(active, operator)
		s, errS := level(standby, operator)
		return errA == nil && errS == nil && a == 250 && s == 240
	})

	// Each node's probe of its peer, as it reports it: reachable, with no
	// error. (The levels alone would not show a failing probe for its
	// first seconds: a verdict about a just-started server does not count.)
	for _, n := range []*testcluster.Node{active, standby} {
		testwait.For(t, 20*time.Second, n.ID+"'s probe reaching its secure-only peer", func() bool {
			var st controlpb.StatusResponse
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := c.CtlJSON(ctx, []*testcluster.Node{n}, &st, "status"); err != nil || len(st.OpcuaVerdicts) != 1 {
				return false
			}
			v := st.OpcuaVerdicts[0]

			return v.Reachable && v.Error == "" && time.Unix(0, v.AtUnixNano).After(deployed)
		})

	}
	var pick struct {
		Picked string `json:"picked"`
	}
	ctlJSON(t, c, nil, &pick, "opcua", "pick", standby.OPCUA+","+active.OPCUA,
		"--security-policy", "Basic256Sha256", "--security-mode", "SignAndEncrypt", "--cert", certFile, "--key", keyFile,
		"--user", "operator", "--password-file", filepath.Join(secrets, "operator.pass"))
	if pick.Picked != active.OPCUA {
		t.Fatalf("scadactl opcua pick over SignAndEncrypt chose %q, want the Active's %s", pick.Picked, active.OPCUA)
	}

	if _, err := level(active, uasec.ClientOptions{Timeout: 3 * time.Second}); err == nil {
		t.Fatal("an anonymous None session was served by a secure-only site")
	}
	wrongPassword := operator
	wrongPassword.Password = "guess"
	if _, err := level(active, wrongPassword); err == nil {
		t.Fatal("a wrong password was accepted")
	}

	dial := func(n *testcluster.Node, o uasec.ClientOptions) *gopcua.Client {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cl, err := uasec.Dial(ctx, n.OPCUA, o)
		if err != nil {
			t.Fatalf("dial %s as %s: %v", n.ID, o.Username, err)
		}
		t.Cleanup(func() { o.Close(cl) })
		return cl
	}
	before, err := sim.Stats()
	if err != nil {
		t.Fatal(err)
	}
	ac := dial(active, operator)
	if st := writeDouble(t, dial(active, viewer), siteNode(t, ac, "Pump1.SpeedSP"), 1); st != ua.StatusBadUserAccessDenied {
		t.Fatalf("a viewer's write on the Active: %v, want BadUserAccessDenied", st)
	}
	sc := dial(standby, operator)
	if st := writeDouble(t, sc, siteNode(t, sc, "Pump1.SpeedSP"), 2); st == ua.StatusOK {
		t.Fatal("the Standby accepted an operator's write")
	}
	if st := writeDouble(t, ac, siteNode(t, ac, "Pump1.SpeedSP"), 42); st != ua.StatusOK {
		t.Fatalf("the Active refused an operator's write: %v", st)
	}
	after, _ := sim.Stats()
	if got := after.Commands["Write"] + after.Commands["write"] - before.Commands["Write"] - before.Commands["write"]; got != 1 {
		t.Fatalf("the gateway got %d writes, want the operator's one on the Active", got)
	}
	waitGoodChanging(t, ac, siteNode(t, ac, "Pump1.Speed"), 20*time.Second, "live values on the Active over SignAndEncrypt")

	// A client following the redundant pair, as `scadactl opcua watch`
	// does, subscribed over SignAndEncrypt to a live tag.
	watched := &lockedbuf.Buffer{}
	wctx, stopWatch := context.WithCancel(context.Background())
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		_ = opcua.WatchWith(wctx, []string{active.OPCUA, standby.OPCUA}, "ns=2;s=Pump1.Speed", watched, operator)
	}()
	defer func() {
		stopWatch()
		<-watchDone
		if t.Failed() {
			t.Logf("watch output:\n%s", watched.String())
		}
	}()
	testwait.For(t, 20*time.Second, "the watching client receiving values from the Active", func() bool {
		return strings.Count(watched.String(), active.OPCUA+" ns=2;s=Pump1.Speed = ") >= 3
	})

	killed := time.Now()
	c.Kill(active)
	testwait.For(t, 15*time.Second, "the survivor's ServiceLevel 250 over SignAndEncrypt", func() bool {
		lvl, err := level(standby, operator)
		return err == nil && lvl == 250
	})

	t.Logf("survivor advertised 250 (read over SignAndEncrypt) %s after the SIGKILL", time.Since(killed).Round(time.Millisecond))
	waitGoodChanging(t, sc, siteNode(t, sc, "Pump1.Speed"), 20*time.Second, "live values on the survivor over SignAndEncrypt")
	testwait.For(t, 20*time.Second, "the watching client to follow the failover and receive new values from the survivor", func() bool {
		got := watched.String()
		return strings.Contains(got, "failover "+active.OPCUA+" -> "+standby.OPCUA) && strings.Contains(got, "notification gap") &&
			strings.Count(got, standby.OPCUA+" ns=2;s=Pump1.Speed = ") >= 3
	})

}
