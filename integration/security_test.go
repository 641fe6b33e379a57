package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/pki"
)

// asRole runs scadactl against one node with the client certificate name.
func asRole(ctx context.Context, c *testcluster.Cluster, name string, n *testcluster.Node, args ...string) (string, string, int) {
	full := append([]string{"--cert", filepath.Join(c.Certs, name+".crt"), "--key", filepath.Join(c.Certs, name+".key"), "--cacert", filepath.Join(c.Certs, "ca.crt")}, args...)
	out, errs, code, err := c.Ctl(ctx, []*testcluster.Node{n}, full...)
	if err != nil {
		return out, err.Error(), -1
	}
	return out, errs, code
}

func issueClient(ctx context.Context, t *testing.T, c *testcluster.Cluster, name, role string) {
	t.Helper()
	if out, errs, code, err := c.Ctl(ctx, nil, "certs", "issue", "--dir", c.Certs, "--name", name, "--client", "--role", role); err != nil || code != 0 {
		t.Fatalf("certs issue %s --role %s: exit %d, %q %q, %v", name, role, code, out, errs, err)
	}
}

// TestViewerCannotWriteThroughActiveOrStandby: a viewer certificate reads
// but cannot fail over, deploy, discard or restore (exit 4,
// PermissionDenied), on the Active and on a Standby, which would forward;
// an operator fails over through the Standby, and the audit log names the
// operator and the node that forwarded, not the node alone.
func TestViewerCannotWriteThroughActiveOrStandby(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var standby *testcluster.Node
	for _, n := range c.Nodes {
		if !n.Witness && n != active {
			standby = n
		}
	}
	issueClient(ctx, t, c, "watcher", "viewer")
	issueClient(ctx, t, c, "shiftlead", "operator")

	site := filepath.Join(t.TempDir(), "site.yaml")
	if err := os.WriteFile(site, testcluster.SiteConfig("sec", map[string]string{"sink": "http://127.0.0.1:1/"}, 3), 0o644); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "backup.snap")
	if out, errs, code, err := c.Ctl(ctx, []*testcluster.Node{active}, "snapshot", "save", snap); err != nil || code != 0 {
		t.Fatalf("admin snapshot save: exit %d, %q %q, %v", code, out, errs, err)
	}

	for _, n := range []*testcluster.Node{active, standby} {
		if _, errs, code := asRole(ctx, c, "watcher", n, "status"); code != 0 {
			t.Errorf("viewer status on %s: exit %d, %q", n.ID, code, errs)
		}
		if _, errs, code := asRole(ctx, c, "watcher", n, "audit"); code != 0 {
			t.Errorf("viewer audit on %s: exit %d, %q", n.ID, code, errs)
		}
		for _, args := range [][]string{
			{"failover"},
			{"deploy", "push", site},
			{"sf", "discard", "--all", "--target", "sink", "--yes"},
			{"snapshot", "restore", snap, "--yes"},
		} {
			_, errs, code := asRole(ctx, c, "watcher", n, args...)
			if code != 4 || !strings.Contains(errs, "PermissionDenied") && !strings.Contains(errs, "role viewer") {
				t.Errorf("viewer %s on %s: exit %d, %q; want exit 4, PermissionDenied naming the role", strings.Join(args, " "), n.ID, code, errs)
			}
		}
		// An operator may not restore either: that is an admin's.
		if _, errs, code := asRole(ctx, c, "shiftlead", n, "snapshot", "restore", snap, "--yes"); code != 4 || !strings.Contains(errs, "needs admin") {
			t.Errorf("operator snapshot restore on %s: exit %d, %q; want exit 4 saying it needs admin", n.ID, code, errs)
		}
	}
	if out, _, code, _ := c.Ctl(ctx, nil, "deploy", "history"); code != 5 {
		t.Fatalf("deploy history after the viewer's refused pushes: exit %d, %q; want exit 5, nothing deployed", code, out)
	}

	if out, errs, code := asRole(ctx, c, "shiftlead", standby, "failover"); code != 0 {
		t.Fatalf("operator failover through the Standby %s: exit %d, %q %q", standby.ID, code, out, errs)
	}
	var audit struct{ Entries []*controlpb.AuditEntry }
	want := "shiftlead via " + standby.ID
	err := testwait.Poll(ctx, func() bool {
		out, _, code := asRole(ctx, c, "watcher", standby, "--output", "json", "audit")
		if code != 0 || json.Unmarshal([]byte(out), &audit.Entries) != nil {
			return false
		}
		for _, e := range audit.Entries {
			if e.Kind == "failover" && e.Actor == want {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("audit log after a failover through the Standby: %+v; want an entry by %q", audit.Entries, want)
	}
	for _, e := range audit.Entries {
		if strings.HasPrefix(e.Actor, "operator@") {
			t.Errorf("audit entry %+v names a node, not the caller", e)
		}
	}
}

// issueExpired writes name.crt/.key: a producer certificate from the site
// CA whose validity ended an hour ago.
func issueExpired(t *testing.T, c *testcluster.Cluster, name string) {
	t.Helper()
	leaf, err := siteCA(t, c).Issue(pki.LeafSpec{Name: name, Usage: pki.ClientUsage, Role: pki.RoleProducer, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	writeLeaf(t, c, name, leaf)
}

// siteCA is the cluster's site CA, read from its files.
func siteCA(t *testing.T, c *testcluster.Cluster) *pki.CA {
	t.Helper()
	read := func(file string) []byte {
		data, err := os.ReadFile(filepath.Join(c.Certs, file))
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(data)
		return block.Bytes
	}
	caCert, err := x509.ParseCertificate(read("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := x509.ParsePKCS8PrivateKey(read("ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	return &pki.CA{Cert: caCert, Key: key.(*ecdsa.PrivateKey)}
}

func writeLeaf(t *testing.T, c *testcluster.Cluster, name string, leaf *pki.Leaf) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(c.Certs, name+".crt"), leaf.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.Certs, name+".key"), leaf.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestClientCertificateWithoutARoleIsRefused: v0.1.0 took a client
// certificate issued before roles for admin, for that release only. Now
// the control API refuses it on the Active and on a Standby, which would
// forward (exit 4, PermissionDenied, naming the certificate and the fix),
// and the HTTP listener answers 403 with a JSON body that says so; the
// nodes' own certificates still carry the cluster (an operator's call
// forwarded by the Standby succeeds).
func TestClientCertificateWithoutARoleIsRefused(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info", HTTPTLS: true})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	deploySite(t, c, testcluster.SiteConfig("sec", map[string]string{"sink": "http://127.0.0.1:1/"}, 3))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	standby := otherVoter(t, c, active)
	old, err := siteCA(t, c).Issue(pki.LeafSpec{Name: "old-operator", Usage: pki.ClientUsage, NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	writeLeaf(t, c, "old-operator", old)
	fix := "scadactl certs issue --client --role viewer|operator|admin"

	for _, n := range []*testcluster.Node{active, standby} {
		for _, args := range [][]string{{"status"}, {"failover"}, {"members", "list"}} {
			_, errs, code := asRole(ctx, c, "old-operator", n, args...)
			if code != 4 || !strings.Contains(errs, `"old-operator"`) || !strings.Contains(errs, "carries no role") || !strings.Contains(errs, fix) {
				t.Errorf("%s on %s with a certificate without a role: exit %d, %q; want exit 4 naming the certificate, what is wrong and %q", strings.Join(args, " "), n.ID, code, errs, fix)
			}
		}
		code, body, err := postEnqueue(ctx, client(t, c, "old-operator"), n.URL("/v1/sf/sink"), "old")
		var refusal struct{ Error, Code string }
		if err != nil || code != http.StatusForbidden || json.Unmarshal([]byte(body), &refusal) != nil || refusal.Code != "forbidden" || !strings.Contains(refusal.Error, "carries no role") || !strings.Contains(refusal.Error, "--role") {
			t.Errorf("enqueue on %s with a certificate without a role: %d %q %v; want 403 with a JSON body saying it carries no role", n.ID, code, body, err)
		}
		if resp, err := client(t, c, "old-operator").Get(n.URL("/metrics")); err != nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("/metrics on %s with a certificate without a role: %v %v; want 403", n.ID, resp, err)
		} else {
			resp.Body.Close()
		}
	}
	if out, errs, code, err := c.Ctl(ctx, []*testcluster.Node{standby}, "failover"); err != nil || code != 0 {
		t.Fatalf("admin failover through the Standby %s: exit %d, %q %q %v", standby.ID, code, out, errs, err)
	}
	var stats []*controlpb.SFTargetStats
	if err := c.CtlJSON(ctx, nil, &stats, "sf", "stats"); err != nil {
		t.Fatal(err)
	}
	for _, ts := range stats {
		if ts.Pending != 0 || ts.DeliveredTotal != 0 || ts.Parked != 0 {
			t.Errorf("target %s: %+v; a refused enqueue was stored", ts.Target, ts)
		}
	}
}

// TestHTTPEnqueueNeedsAProducer: the HTTP listener is HTTPS by default.
// Plain HTTP, no certificate (401 naming what is missing), an expired or
// foreign-CA certificate (refused at the handshake), a viewer's
// certificate, every node's certificate of the site and a producer
// certificate for another target (403) store nothing; a producer
// certificate for the target is accepted and the message delivered.
// /health/* stays open; /metrics takes a certificate.
func TestHTTPEnqueueNeedsAProducer(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info", HTTPTLS: true})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	sink := startSink(t)
	deploySite(t, c, testcluster.SiteConfig("sec", map[string]string{"sink": sink.URL, "other": sink.URL + "other"}, 3))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	issueClient(ctx, t, c, "watcher", "viewer")
	if out, errs, code, err := c.Ctl(ctx, nil, "certs", "issue", "--dir", c.Certs, "--name", "feed", "--client", "--role", "producer", "--targets", "sink"); err != nil || code != 0 {
		t.Fatalf("certs issue feed: exit %d, %q %q, %v", code, out, errs, err)
	}
	if out, errs, code, err := c.Ctl(ctx, nil, "certs", "issue", "--dir", c.Certs, "--name", "otherfeed", "--client", "--role", "producer", "--targets", "other"); err != nil || code != 0 {
		t.Fatalf("certs issue otherfeed: exit %d, %q %q, %v", code, out, errs, err)
	}
	issueExpired(t, c, "stale")
	foreign, err := pki.GenerateSite("elsewhere", nil, []string{"feed"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	writeLeaf(t, c, "foreign", foreign.Clients["feed"])

	post := func(cl *http.Client, url, id string) (int, string, error) { return postEnqueue(ctx, cl, url, id) }
	client := func(name string) *http.Client { return client(t, c, name) }
	for _, n := range []*testcluster.Node{active} {
		sinkURL := n.URL("/v1/sf/sink")
		plain := "http://" + n.HTTPAddr + "/v1/sf/sink"
		if code, body, err := post(&http.Client{Timeout: 5 * time.Second}, plain, "plain"); err == nil && code < 300 {
			t.Errorf("plain HTTP enqueue on %s: %d %q; want it refused", n.ID, code, body)
		}
		code, body, err := post(client(""), sinkURL, "anonymous")
		if err != nil || code != http.StatusUnauthorized || !strings.Contains(body, `"missing":"client certificate or bearer token"`) {
			t.Errorf("enqueue without credentials: %d %q %v; want 401 naming the missing client certificate", code, body, err)
		}
		// An expired certificate fails the handshake. A Go client offers
		// no certificate of a CA the server did not ask for: the foreign
		// one is not even sent, and the answer is the 401 of none.
		if code, body, err := post(client("stale"), sinkURL, "stale"); err == nil {
			t.Errorf("enqueue with an expired certificate: %d %q; want the handshake refused", code, body)
		}
		if code, body, err := post(client("foreign"), sinkURL, "foreign"); err == nil && code != http.StatusUnauthorized {
			t.Errorf("enqueue with a foreign-CA certificate: %d %q; want the handshake refused or 401", code, body)
		}
		refusedAs := map[string]string{"watcher": "role viewer", "otherfeed": "may enqueue to other only"}
		// Every node's certificate of the site (the Active's own, the
		// Standby's, the witness's) presented as a client: no producer.
		for _, m := range c.Nodes {
			refusedAs[m.ID] = "is a node's certificate"
		}
		for name, want := range refusedAs {
			if code, body, err := post(client(name), sinkURL, name); err != nil || code != http.StatusForbidden || !strings.Contains(body, want) {
				t.Errorf("enqueue as %s: %d %q %v; want 403 saying %q", name, code, body, err, want)
			}
		}
		if code, body, err := post(client("feed"), sinkURL, "good"); err != nil || code != http.StatusCreated {
			t.Fatalf("enqueue with the producer certificate: %d %q %v; want 201", code, body, err)
		}
		resp, err := client("").Get(n.URL("/health/ready"))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("/health/ready without a certificate: %v %v; want 200", resp, err)
		} else {
			resp.Body.Close()
		}
		if resp, err := client("").Get(n.URL("/metrics")); err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("/metrics without a certificate: %v %v; want 401", resp, err)
		} else {
			resp.Body.Close()
		}
		if resp, err := client("watcher").Get(n.URL("/metrics")); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("/metrics with a site certificate: %v %v; want 200", resp, err)
		} else {
			resp.Body.Close()
		}
	}
	var stats []*controlpb.SFTargetStats
	var last error
	defer func() {
		if t.Failed() {
			d, _ := sink.Deliveries()
			t.Logf("last sf stats %v (error %v), deliveries %+v", stats, last, d)
			for _, n := range c.Nodes {
				out, errs, _, _ := c.Ctl(context.Background(), []*testcluster.Node{n}, "sf", "list", "--target", "sink")
				out2, _, _, _ := c.Ctl(context.Background(), []*testcluster.Node{n}, "sf", "stats", "--local")
				t.Logf("%s: sf list %s %s; stats --local %s", n.ID, out, errs, out2)
			}
		}
	}()
	testwait.For(t, 30*time.Second, "the producer's message delivered and nothing else pending", func() bool {
		// A fresh slice: decoding into the last one would keep a field
		// the new answer leaves out (zero values are omitted).
		stats = nil
		if last = c.CtlJSON(ctx, nil, &stats, "sf", "stats"); last != nil {
			return false
		}
		for _, ts := range stats {
			if ts.Pending != 0 || ts.Parked != 0 {
				return false
			}
		}
		d, err := sink.Deliveries()
		return err == nil && len(d) >= 1
	})
	if d, _ := sink.Deliveries(); len(d) != 1 || d[0].ID != "good" {
		t.Errorf("deliveries %+v; want only the producer's message", d)
	}
	for _, ts := range stats {
		if want := map[string]uint64{"sink": 1}[ts.Target]; ts.DeliveredTotal != want {
			t.Errorf("target %s delivered %d; want %d: a refused enqueue was stored", ts.Target, ts.DeliveredTotal, want)
		}
	}
}

// TestRevokedCertificateIsCutOffEverywhere: revoking the operator
// certificate that holds an open control stream on every node ends those
// streams within a second of the revocation's commit, and every node
// refuses the certificate's next call; a revoked producer certificate's
// kept-alive HTTPS connection is closed and a new one refused, nothing
// stored; certs list shows what was issued and what is revoked.
func TestRevokedCertificateIsCutOffEverywhere(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info", HTTPTLS: true})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	sink := startSink(t)
	deploySite(t, c, testcluster.SiteConfig("revoke", map[string]string{"sink": sink.URL}, 3))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	issueClient(ctx, t, c, "shiftlead", "operator")
	issueClient(ctx, t, c, "feed", "producer")

	// An open enqueue stream of the operator on every node, each proven
	// live by one acknowledged message.
	type open struct {
		node  string
		ended chan time.Time
	}
	var streams []open
	for i, n := range c.Nodes {
		s, err := nodeClient(t, c, "shiftlead", n).SFEnqueueStream(ctx)
		if err != nil {
			t.Fatalf("open a stream on %s: %v", n.ID, err)
		}
		id := fmt.Sprintf("before-%d", i)
		if err := s.Send(&controlpb.SFEnqueueRequest{Target: "sink", Id: id, Payload: []byte(id)}); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Recv(); err != nil || r.Code != 0 {
			t.Fatalf("first message on %s's stream: %v %v", n.ID, r, err)
		}
		o := open{node: n.ID, ended: make(chan time.Time, 1)}
		go func() {
			_, err := s.Recv() // nothing more is sent: only the end comes
			if err != nil {
				o.ended <- time.Now()
			}
		}()
		streams = append(streams, o)
	}
	feed := client(t, c, "feed")
	if code, body, err := postEnqueue(ctx, feed, active.URL("/v1/sf/sink"), "feed-before"); err != nil || code != http.StatusCreated {
		t.Fatalf("producer enqueue before the revocation: %d %q %v", code, body, err)
	}

	if out, errs, code, err := c.Ctl(ctx, nil, "certs", "revoke", filepath.Join(c.Certs, "shiftlead.crt"), "--reason", "laptop lost"); err != nil || code != 0 {
		t.Fatalf("certs revoke shiftlead.crt: exit %d, %q %q, %v", code, out, errs, err)
	}
	committed := time.Now()
	for _, o := range streams {
		select {
		case at := <-o.ended:
			t.Logf("%s closed the revoked operator's stream %s after the revoke command returned", o.node, at.Sub(committed).Round(time.Millisecond))
		case <-time.After(time.Until(committed.Add(time.Second))):
			t.Errorf("%s still holds the revoked operator's stream 1 s after the revocation", o.node)
		}
	}
	for _, n := range c.Nodes {
		if _, errs, code := asRole(ctx, c, "shiftlead", n, "status"); code == 0 {
			t.Errorf("the revoked operator's status on %s: exit 0; want it refused (%q)", n.ID, errs)
		}
	}

	var listed []struct {
		Serial  string `json:"serial"`
		Name    string `json:"name"`
		Revoked bool   `json:"revoked"`
	}
	if err := c.CtlJSON(ctx, nil, &listed, "certs", "list", "--dir", c.Certs); err != nil {
		t.Fatal(err)
	}
	feedSerial := ""
	for _, r := range listed {
		if r.Revoked != (r.Name == "shiftlead") {
			t.Errorf("certs list: %+v; want only shiftlead revoked", r)
		}
		if r.Name == "feed" {
			feedSerial = r.Serial
		}
	}
	if feedSerial == "" {
		t.Fatalf("certs list names no feed: %+v", listed)
	}
	if out, errs, code, err := c.Ctl(ctx, nil, "certs", "revoke", feedSerial); err != nil || code != 0 {
		t.Fatalf("certs revoke %s: exit %d, %q %q, %v", feedSerial, code, out, errs, err)
	}
	testwait.For(t, 2*time.Second, "the revoked producer refused", func() bool {
		_, _, err := postEnqueue(ctx, feed, active.URL("/v1/sf/sink"), "feed-after")
		return err != nil
	})
	if _, _, err := postEnqueue(ctx, client(t, c, "feed"), active.URL("/v1/sf/sink"), "feed-after-new"); err == nil {
		t.Error("a new connection of the revoked producer was accepted")
	}
	var ids []string
	testwait.For(t, 20*time.Second, "what was acknowledged delivered", func() bool {
		d, err := sink.Deliveries()
		ids = ids[:0]
		for _, x := range d {
			ids = append(ids, x.ID)
		}
		return err == nil && len(d) >= len(c.Nodes)+1
	})
	for _, id := range ids {
		if strings.HasPrefix(id, "feed-after") {
			t.Errorf("%s was stored after its certificate was revoked", id)
		}
	}
}

func client(t *testing.T, c *testcluster.Cluster, name string) *http.Client {
	t.Helper()
	cl, err := c.HTTPClient(name)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func postEnqueue(ctx context.Context, cl *http.Client, url, id string) (int, string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(id))
	req.Header.Set("Idempotency-Key", id)
	resp, err := cl.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), nil
}

// TestHTTPEnqueueWithBearerTokens: a token from scadactl tokens create is
// shown once and accepted on every node (delivered); a token for another
// target, an expired one, a revoked one and an unknown one are refused
// with 403 and store nothing; a viewer cannot create tokens; tokens list
// names them without their secrets.
func TestHTTPEnqueueWithBearerTokens(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info", HTTPTLS: true})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	sink := startSink(t)
	deploySite(t, c, testcluster.SiteConfig("tokens", map[string]string{"sink": sink.URL, "other": sink.URL + "other"}, 3))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var standby *testcluster.Node
	for _, n := range c.Nodes {
		if !n.Witness && n != active {
			standby = n
		}
	}
	create := func(args ...string) string {
		t.Helper()
		out, errs, code, err := c.Ctl(ctx, nil, append([]string{"tokens", "create"}, args...)...)
		if err != nil || code != 0 || !strings.HasPrefix(out, "scadad_") {
			t.Fatalf("tokens create %v: exit %d, %q %q, %v", args, code, out, errs, err)
		}
		return strings.TrimSpace(out)
	}
	feed := create("--name", "feed", "--targets", "sink", "--expires", "90d")
	other := create("--name", "otherfeed", "--targets", "other")
	short := create("--name", "short", "--targets", "sink", "--expires", "1s")
	shortMade := time.Now()
	issueClient(ctx, t, c, "watcher", "viewer")
	if _, errs, code := asRole(ctx, c, "watcher", active, "tokens", "create", "--name", "sneaky"); code != 4 {
		t.Errorf("viewer tokens create: exit %d, %q; want 4", code, errs)
	}

	cl := client(t, c, "")
	post := func(n *testcluster.Node, token, id string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, n.URL("/v1/sf/sink"), strings.NewReader(id))
		req.Header.Set("Idempotency-Key", id)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := cl.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, n := range []*testcluster.Node{active, standby} {
		var code int
		var body string
		testwait.ForDetail(t, 5*time.Second, "the token known on "+n.ID, func() (bool, string) {
			code, body = post(n, feed, "token-"+n.ID)
			return code == http.StatusCreated, fmt.Sprintf("%d %s", code, body)
		})
		if code, body = post(n, other, "other-"+n.ID); code != http.StatusForbidden || !strings.Contains(body, "may enqueue to other only") {
			t.Errorf("token for another target on %s: %d %q; want 403", n.ID, code, body)
		}
		if code, body = post(n, "scadad_notatoken", "bogus-"+n.ID); code != http.StatusForbidden {
			t.Errorf("unknown token on %s: %d %q; want 403", n.ID, code, body)
		}
	}
	time.Sleep(time.Until(shortMade.Add(1500 * time.Millisecond)))
	if code, body := post(active, short, "expired"); code != http.StatusForbidden || !strings.Contains(body, "expired") {
		t.Errorf("expired token: %d %q; want 403 saying expired", code, body)
	}

	var listed []struct {
		Name    string   `json:"name"`
		Targets []string `json:"targets"`
	}
	out, errs, code, err := c.Ctl(ctx, nil, "--output", "json", "tokens", "list")
	if err != nil || code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed) != 3 {
		t.Fatalf("tokens list: exit %d, %q %q, %v", code, out, errs, err)
	}
	if strings.Contains(out, strings.TrimPrefix(feed, "scadad_")) {
		t.Errorf("tokens list shows a secret: %s", out)
	}
	if out, errs, code, err := c.Ctl(ctx, nil, "tokens", "revoke", "feed"); err != nil || code != 0 {
		t.Fatalf("tokens revoke feed: exit %d, %q %q, %v", code, out, errs, err)
	}
	// Each node refuses the token once it has applied the revocation (a
	// Standby a moment after the leader): a probe before that may still
	// be stored, under its one id; nothing after it.
	testwait.For(t, 2*time.Second, "the revoked token refused on every node", func() bool {
		a, _ := post(active, feed, "probe-a")
		s, _ := post(standby, feed, "probe-s")
		return a == http.StatusForbidden && s == http.StatusForbidden
	})
	for _, n := range []*testcluster.Node{active, standby} {
		if code, body := post(n, feed, "after-revoke-"+n.ID); code != http.StatusForbidden {
			t.Errorf("revoked token on %s: %d %q; want 403", n.ID, code, body)
		}
	}

	testwait.For(t, 20*time.Second, "the two accepted messages delivered", func() bool {
		d, err := sink.Deliveries()
		got := map[string]bool{}
		for _, x := range d {
			got[x.ID] = true
		}
		return err == nil && got["token-"+active.ID] && got["token-"+standby.ID]
	})
	d, _ := sink.Deliveries()
	for _, x := range d {
		switch x.ID {
		case "token-" + active.ID, "token-" + standby.ID, "probe-a", "probe-s":
		default:
			t.Errorf("delivered %q: a refused enqueue was stored", x.ID)
		}
	}
}

// TestRevokedNodeLosesItsOpenRaftConnections: revoking a node's
// certificate closes the Raft connections already open to it, not only the
// next handshake: the leader's heartbeats to the revoked witness stop
// within 1 s of the revocation, and it hears from no one after (each
// redial is refused), while the voters go on.
func TestRevokedNodeLosesItsOpenRaftConnections(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	var witness *testcluster.Node
	for _, n := range c.Nodes {
		if n.Witness {
			witness = n
		}
	}
	status := func(n *testcluster.Node) (*controlpb.StatusResponse, time.Time, error) {
		st := &controlpb.StatusResponse{}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		err := c.CtlJSON(ctx, []*testcluster.Node{n}, st, "status")
		return st, time.Now(), err
	}
	testwait.For(t, 20*time.Second, "the witness hearing from the leader", func() bool {
		st, _, err := status(witness)
		return err == nil && st.LastContactMs >= 0 && st.LastContactMs < 500 && st.LeaderId == active.ID
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, errs, code, err := c.Ctl(ctx, []*testcluster.Node{active}, "certs", "revoke", filepath.Join(c.Certs, witness.ID+".crt"), "--reason", "decommissioned"); err != nil || code != 0 {
		t.Fatalf("certs revoke %s.crt: exit %d, %q %q, %v", witness.ID, code, out, errs, err)
	}
	revoked := time.Now()

	// The witness's last contact with the leader, as it reports it, stops
	// moving: read it once it has been still for 3 s.
	var lastContact time.Time
	testwait.For(t, 20*time.Second, "the witness no longer hearing from the leader", func() bool {
		st, at, err := status(witness)
		if err != nil || st.LastContactMs < 3000 {
			return false
		}
		lastContact = at.Add(-time.Duration(st.LastContactMs) * time.Millisecond)
		return true
	})
	t.Logf("the witness last heard from the leader %s after the revoke command returned", lastContact.Sub(revoked).Round(time.Millisecond))
	if lastContact.After(revoked.Add(time.Second)) {
		t.Errorf("the witness heard from the leader until %s after the revocation; want its connections closed within 1 s", lastContact.Sub(revoked).Round(time.Millisecond))
	}
	// The voters still commit: a write through the Standby succeeds.
	if out, errs, code, err := c.Ctl(ctx, []*testcluster.Node{otherVoter(t, c, active)}, "tokens", "create", "--name", "still-committing"); err != nil || code != 0 {
		t.Fatalf("a write after the revocation: exit %d, %q %q, %v", code, out, errs, err)
	}
}
