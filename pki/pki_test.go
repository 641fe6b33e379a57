package pki

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeTestPair(t *testing.T, dir, name string, certPEM, keyPEM []byte) {
	t.Helper()
	if err := writePair(dir, name, certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
}

func TestInitWritesLoadableFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if err := Init(dir, "plant1", []string{"node-a", "node-b"}, []string{"operator"}, 24*time.Hour); err != nil {
		t.Fatalf("Init: %v", err)
	}
	for _, name := range []string{"ca", "node-a", "node-b", "operator"} {
		st, err := os.Stat(filepath.Join(dir, name+".key"))
		if err != nil {
			t.Fatalf("stat key of %s: %v", name, err)
		}
		if perm := st.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s.key mode = %o, want 600", name, perm)
		}
		if _, err := os.Stat(filepath.Join(dir, name+".crt")); err != nil {
			t.Errorf("stat cert of %s: %v", name, err)
		}
	}
	ca := filepath.Join(dir, "ca.crt")
	srv, err := LoadServerTLS(ca, filepath.Join(dir, "node-a.crt"), filepath.Join(dir, "node-a.key"))
	if err != nil {
		t.Fatalf("LoadServerTLS: %v", err)
	}
	cli, err := LoadClientTLS(ca, filepath.Join(dir, "operator.crt"), filepath.Join(dir, "operator.key"))
	if err != nil {
		t.Fatalf("LoadClientTLS: %v", err)
	}
	if srv.MinVersion != tls.VersionTLS13 || srv.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Errorf("server config not strict: min %x auth %v", srv.MinVersion, srv.ClientAuth)
	}
	leaf := srv.Certificates[0].Leaf
	if leaf.Subject.CommonName != "node-a" {
		t.Errorf("node CN = %q", leaf.Subject.CommonName)
	}
	if err := leaf.VerifyHostname("node-a"); err != nil {
		t.Errorf("node name SAN: %v", err)
	}
	if err := leaf.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("loopback SAN: %v", err)
	}
	name, err := handshake(t, srv, cli, "node-a")
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if name != "operator" {
		t.Errorf("server saw client %q, want operator", name)
	}
	// The operator's certificate is clientAuth only: it cannot serve.
	if _, err := LoadServerTLS(ca, filepath.Join(dir, "operator.crt"), filepath.Join(dir, "operator.key")); !errors.Is(err, ErrWrongUsage) {
		t.Errorf("operator as server: err = %v, want ErrWrongUsage", err)
	}
}

func TestInitRefusesExistingCA(t *testing.T) {
	dir := t.TempDir()
	if err := Init(dir, "plant1", []string{"a"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	err = Init(dir, "plant1", []string{"a"}, nil, time.Hour)
	if !errors.Is(err, ErrCAExists) {
		t.Fatalf("second Init: err = %v, want ErrCAExists", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if string(before) != string(after) {
		t.Fatal("refused Init still changed ca.crt")
	}
	if err := Init(dir, "plant1", []string{"a"}, nil, time.Hour, WithOverwrite()); err != nil {
		t.Fatalf("Init with overwrite: %v", err)
	}
	after, _ = os.ReadFile(filepath.Join(dir, "ca.crt"))
	if string(before) == string(after) {
		t.Fatal("overwrite kept the old CA")
	}
}

// A CA given its own validity outlives the certificates it signs, and
// ReadValidity reports both ends.
func TestInitCAValidity(t *testing.T) {
	cases := []struct {
		name           string
		opts           []InitOption
		wantCA, wantNd time.Duration
	}{
		{"CA with its certificates", nil, 48 * time.Hour, 48 * time.Hour},
		{"CA for ten years", []InitOption{WithCAValidity(3650 * 24 * time.Hour)}, 3650 * 24 * time.Hour, 48 * time.Hour},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			start := time.Now()
			if err := Init(dir, "plant1", []string{"node-a"}, nil, 48*time.Hour, tc.opts...); err != nil {
				t.Fatal(err)
			}
			v, err := ReadValidity(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "node-a.crt"))
			if err != nil {
				t.Fatal(err)
			}
			near := func(got time.Time, want time.Duration) bool {
				d := got.Sub(start.Add(want))
				return d > -time.Minute && d < time.Minute
			}
			if !near(v.CA, tc.wantCA) || !near(v.Cert, tc.wantNd) {
				t.Fatalf("CA until %v, node until %v; want %v and %v from %v", v.CA, v.Cert, tc.wantCA, tc.wantNd, start)
			}
		})
	}
	if _, err := ReadValidity(filepath.Join(t.TempDir(), "ca.crt"), "node.crt"); !errors.Is(err, ErrMissing) {
		t.Fatalf("ReadValidity of missing files: err = %v, want ErrMissing", err)
	}
}

func TestInitRejectsBadInput(t *testing.T) {
	cases := []struct {
		name     string
		nodes    []string
		clients  []string
		validity time.Duration
		opts     []InitOption
	}{
		{"zero validity", []string{"a"}, nil, 0, nil},
		{"path in name", []string{"../a"}, nil, time.Hour, nil},
		{"duplicate", []string{"a"}, []string{"a"}, time.Hour, nil},
		{"clashes with CA", []string{"ca"}, nil, time.Hour, nil},
		{"empty name", []string{""}, nil, time.Hour, nil},
		{"CA shorter than its certificates", []string{"a"}, nil, 2 * time.Hour, []InitOption{WithCAValidity(time.Hour)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			err := Init(dir, "s", tc.nodes, tc.clients, tc.validity, tc.opts...)
			if !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("err = %v, want ErrInvalidInput", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "ca.crt")); err == nil {
				t.Fatal("a rejected Init wrote a CA")
			}
		})
	}
}

// TestLoadRefusals covers every way a TLS configuration must fail closed.
func TestLoadRefusals(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, err := GenerateCA("plant1", time.Time{}, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := GenerateCA("plant1", time.Time{}, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	expiredCA, err := GenerateCA("old", now.Add(-2*time.Hour), now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	issue := func(c *CA, spec LeafSpec) *Leaf {
		t.Helper()
		l, err := c.Issue(spec)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	good := issue(ca, LeafSpec{Name: "node-a", NotAfter: now.Add(time.Hour)})
	other := issue(ca, LeafSpec{Name: "node-b", NotAfter: now.Add(time.Hour)})
	expiredAt := now.Add(-time.Minute).UTC().Truncate(time.Second)
	expired := issue(ca, LeafSpec{Name: "node-old", NotBefore: now.Add(-time.Hour), NotAfter: expiredAt})
	future := issue(ca, LeafSpec{Name: "node-new", NotBefore: now.Add(time.Hour), NotAfter: now.Add(2 * time.Hour)})
	stranger := issue(foreign, LeafSpec{Name: "node-a", NotAfter: now.Add(time.Hour)})
	client := issue(ca, LeafSpec{Name: "operator", Usage: ClientUsage, Role: RoleAdmin, NotAfter: now.Add(time.Hour)})
	oldLeaf := issue(expiredCA, LeafSpec{Name: "node-a", NotAfter: now.Add(time.Hour)})

	writeTestPair(t, dir, "ca", ca.CertPEM, ca.KeyPEM)
	writeTestPair(t, dir, "expired-ca", expiredCA.CertPEM, expiredCA.KeyPEM)
	writeTestPair(t, dir, "good", good.CertPEM, good.KeyPEM)
	writeTestPair(t, dir, "other", other.CertPEM, other.KeyPEM)
	writeTestPair(t, dir, "expired", expired.CertPEM, expired.KeyPEM)
	writeTestPair(t, dir, "future", future.CertPEM, future.KeyPEM)
	writeTestPair(t, dir, "stranger", stranger.CertPEM, stranger.KeyPEM)
	writeTestPair(t, dir, "client", client.CertPEM, client.KeyPEM)
	writeTestPair(t, dir, "oldleaf", oldLeaf.CertPEM, oldLeaf.KeyPEM)
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	badDER := filepath.Join(dir, "baddér.pem")
	if err := os.WriteFile(badDER, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := func(name string) string { return filepath.Join(dir, name) }

	cases := []struct {
		name         string
		ca, crt, key string
		server       bool
		want         error
		mustMention  []string
	}{
		{"valid server", p("ca.crt"), p("good.crt"), p("good.key"), true, nil, nil},
		{"valid client", p("ca.crt"), p("client.crt"), p("client.key"), false, nil, nil},
		{"missing CA", p("nope.crt"), p("good.crt"), p("good.key"), true, ErrMissing, []string{"nope.crt"}},
		{"missing cert", p("ca.crt"), p("nope.crt"), p("good.key"), true, ErrMissing, []string{"nope.crt"}},
		{"missing key", p("ca.crt"), p("good.crt"), p("nope.key"), true, ErrMissing, []string{"nope.key"}},
		{"garbage CA", garbage, p("good.crt"), p("good.key"), true, ErrUnparsable, []string{"garbage.pem"}},
		{"bad DER cert", p("ca.crt"), badDER, p("good.key"), true, ErrUnparsable, []string{"baddér.pem"}},
		{"garbage key", p("ca.crt"), p("good.crt"), garbage, true, ErrUnparsable, []string{"garbage.pem"}},
		{"expired cert", p("ca.crt"), p("expired.crt"), p("expired.key"), true, ErrExpired, []string{"expired.crt", expiredAt.Format(time.RFC3339)}},
		{"not yet valid", p("ca.crt"), p("future.crt"), p("future.key"), true, ErrNotYetValid, []string{"future.crt"}},
		{"expired CA", p("expired-ca.crt"), p("oldleaf.crt"), p("oldleaf.key"), true, ErrExpired, []string{"expired-ca.crt"}},
		{"key of another node", p("ca.crt"), p("good.crt"), p("other.key"), true, ErrKeyMismatch, []string{"other.key", "good.crt"}},
		{"foreign CA", p("ca.crt"), p("stranger.crt"), p("stranger.key"), true, ErrForeignCA, []string{"stranger.crt", "foreign CA"}},
		{"leaf as CA", p("good.crt"), p("other.crt"), p("other.key"), true, ErrNotCA, []string{"good.crt"}},
		{"client cert serving", p("ca.crt"), p("client.crt"), p("client.key"), true, ErrWrongUsage, []string{"serverAuth"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			load := LoadClientTLS
			if tc.server {
				load = LoadServerTLS
			}
			cfg, err := load(tc.ca, tc.crt, tc.key)
			if tc.want == nil {
				if err != nil || cfg == nil {
					t.Fatalf("load: %v", err)
				}
				return
			}
			if cfg != nil {
				t.Fatal("a refused load returned a configuration")
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			for _, m := range tc.mustMention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
		})
	}
}

func TestHandshakeRefusesForeignClient(t *testing.T) {
	site, err := GenerateSite("plant1", []string{"a"}, []string{"operator"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := GenerateSite("plant1", nil, []string{"operator"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := site.ServerTLS("a")
	if err != nil {
		t.Fatal(err)
	}
	good, err := site.ClientTLS("operator")
	if err != nil {
		t.Fatal(err)
	}
	bad, err := other.ClientTLS("operator")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, srv, good, "a"); err != nil {
		t.Fatalf("same-site client refused: %v", err)
	}
	if _, err := handshake(t, srv, bad, "a"); err == nil {
		t.Fatal("foreign-CA client was accepted")
	}
	noCert := good.Clone()
	noCert.Certificates = nil
	if _, err := handshake(t, srv, noCert, "a"); err == nil {
		t.Fatal("client without a certificate was accepted")
	}
}

// handshake runs one TLS handshake over loopback and returns the client CN
// the server verified, or the first error of either side.
func handshake(t *testing.T, srv, cli *tls.Config, serverName string) (string, error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		name string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			done <- result{err: err}
			return
		}
		name, err := PeerName(tc.ConnectionState())
		done <- result{name: name, err: err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := cli.Clone()
	c.ServerName = serverName
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: c}
	conn, derr := d.DialContext(ctx, "tcp", ln.Addr().String())
	if derr == nil {
		// TLS 1.3 clients finish before the server has checked their
		// certificate; a read surfaces the server's verdict.
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = conn.Read(make([]byte, 1))
		conn.Close()
	}
	r := <-done
	if derr != nil {
		return "", derr
	}
	return r.name, r.err
}

// TestIssueFromTheSiteCA: a replacement node or a new operator gets a
// certificate from the CA Init wrote, which the existing certificates
// trust; an existing name is replaced only when asked, and a CA key that
// does not match the certificate is refused.
func TestIssueFromTheSiteCA(t *testing.T) {
	dir := t.TempDir()
	if err := Init(dir, "plant1", []string{"node-a"}, []string{"operator"}, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.crt")
	if err := Issue(dir, "node-c", NodeUsage, RoleNone, 365*24*time.Hour, false, "10.0.0.7"); err != nil {
		t.Fatalf("issue node-c: %v", err)
	}
	srv, err := LoadServerTLS(ca, filepath.Join(dir, "node-c.crt"), filepath.Join(dir, "node-c.key"))
	if err != nil {
		t.Fatalf("load node-c: %v", err)
	}
	leaf := srv.Certificates[0].Leaf
	if err := leaf.VerifyHostname("10.0.0.7"); err != nil {
		t.Errorf("extra SAN: %v", err)
	}
	caCert, err := readCert(ca, "ca")
	if err != nil {
		t.Fatal(err)
	}
	if leaf.NotAfter.After(caCert.NotAfter) {
		t.Errorf("node-c valid until %v, after its CA (%v)", leaf.NotAfter, caCert.NotAfter)
	}
	cli, err := LoadClientTLS(ca, filepath.Join(dir, "operator.crt"), filepath.Join(dir, "operator.key"))
	if err != nil {
		t.Fatal(err)
	}
	if name, err := handshake(t, srv, cli, "node-c"); err != nil || name != "operator" {
		t.Fatalf("the existing operator with the new node: %q, %v", name, err)
	}
	if err := Issue(dir, "ops2", ClientUsage, RoleViewer, time.Hour, false); err != nil {
		t.Fatalf("issue client: %v", err)
	}
	if _, err := LoadClientTLS(ca, filepath.Join(dir, "ops2.crt"), filepath.Join(dir, "ops2.key")); err != nil {
		t.Fatalf("load ops2: %v", err)
	}

	before, _ := os.ReadFile(filepath.Join(dir, "node-a.crt"))
	if err := Issue(dir, "node-a", NodeUsage, RoleNone, time.Hour, false); !errors.Is(err, ErrLeafExists) || !strings.Contains(err.Error(), "--overwrite") {
		t.Fatalf("issue over node-a: err = %v, want ErrLeafExists naming --overwrite", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "node-a.crt")); string(after) != string(before) {
		t.Fatal("a refused issue changed node-a.crt")
	}
	if err := Issue(dir, "node-a", NodeUsage, RoleNone, time.Hour, true); err != nil {
		t.Fatalf("issue over node-a with overwrite: %v", err)
	}

	other := t.TempDir()
	if err := Init(other, "plant2", []string{"x"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	foreignKey, _ := os.ReadFile(filepath.Join(other, "ca.key"))
	if err := os.WriteFile(filepath.Join(dir, "ca.key"), foreignKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Issue(dir, "node-d", NodeUsage, RoleNone, time.Hour, false); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("issue with a CA key of another site: err = %v, want ErrInvalidInput", err)
	}
	if err := Issue(t.TempDir(), "node-d", NodeUsage, RoleNone, time.Hour, false); !errors.Is(err, ErrMissing) {
		t.Fatalf("issue without a CA: err = %v, want ErrMissing", err)
	}
}
