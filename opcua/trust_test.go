package opcua

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/uasec"
)

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// trustedClient makes a client certificate for testKey and a trusted
// folder that holds it.
func trustedClient(t *testing.T) (cert []byte, trustedDir string) {
	t.Helper()
	cert, err := SelfSignedCertificate("urn:scadad:test-client", "localhost", testKey())
	if err != nil {
		t.Fatal(err)
	}
	trustedDir = t.TempDir()
	writeFile(t, filepath.Join(trustedDir, "client.der"), cert)
	return cert, trustedDir
}

// issue makes a certificate for appURI signed by parent (self-signed when
// parent is nil), valid over [from, to].
func issue(t *testing.T, appURI string, key *rsa.PrivateKey, parent *x509.Certificate, parentKey *rsa.PrivateKey, isCA bool, from, to time.Time) *x509.Certificate {
	t.Helper()
	u, err := url.Parse(appURI)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: appURI},
		NotBefore: from, NotAfter: to,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageDataEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{u}, BasicConstraintsValid: true, IsCA: isCA,
	}
	if isCA {
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func pemOf(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func TestTrustList(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	year := func(n int) time.Time { return now.AddDate(n, 0, 0) }
	key := testKey()
	listedDER := issue(t, "urn:client:listed-der", key, nil, nil, false, year(-1), year(1))
	listedPEM := issue(t, "urn:client:listed-pem", key, nil, nil, false, year(-1), year(1))
	ca := issue(t, "urn:site:ca", key, nil, nil, true, year(-1), year(5))
	issued := issue(t, "urn:client:issued", key, ca, key, false, year(-1), year(1))
	otherCA := issue(t, "urn:other:ca", key, nil, nil, true, year(-1), year(5))
	issuedElsewhere := issue(t, "urn:client:elsewhere", key, otherCA, key, false, year(-1), year(1))
	stranger := issue(t, "urn:client:stranger", key, nil, nil, false, year(-1), year(1))
	expired := issue(t, "urn:client:expired", key, nil, nil, false, year(-2), year(-1))

	trusted := t.TempDir()
	writeFile(t, filepath.Join(trusted, "listed.der"), listedDER.Raw)
	writeFile(t, filepath.Join(trusted, "listed.pem"), pemOf(listedPEM))
	writeFile(t, filepath.Join(trusted, "site-ca.pem"), pemOf(ca))
	writeFile(t, filepath.Join(trusted, "expired.der"), expired.Raw)
	writeFile(t, filepath.Join(trusted, ".hidden"), []byte("editor swap file"))

	tests := []struct {
		name     string
		der      []byte
		want     ua.StatusCode // StatusOK: trusted
		rejected bool          // a copy lands in the rejected folder
	}{
		{"listed, DER file", listedDER.Raw, ua.StatusOK, false},
		{"listed, PEM file", listedPEM.Raw, ua.StatusOK, false},
		{"issued by a listed CA", issued.Raw, ua.StatusOK, false},
		{"issued by an unlisted CA", issuedElsewhere.Raw, ua.StatusBadCertificateUntrusted, true},
		{"not listed", stranger.Raw, ua.StatusBadCertificateUntrusted, true},
		{"listed but expired", expired.Raw, ua.StatusBadCertificateTimeInvalid, false},
		{"not a certificate", []byte("hello"), ua.StatusBadCertificateInvalid, false},
		{"none at all", nil, ua.StatusBadCertificateInvalid, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rejected := t.TempDir()
			tl := trustList{trusted: trusted, rejected: rejected}
			err := tl.check(tt.der, now)
			if tt.want == ua.StatusOK {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var u *untrustedError
			if !errors.As(err, &u) || u.code != tt.want {
				t.Fatalf("got %v, want status %v", err, tt.want)
			}
			entries, _ := os.ReadDir(rejected)
			if got := len(entries) == 1; got != tt.rejected {
				t.Fatalf("rejected folder holds %d files, want a copy: %v", len(entries), tt.rejected)
			}
			if tt.rejected {
				b, _ := os.ReadFile(filepath.Join(rejected, entries[0].Name()))
				if string(b) != string(tt.der) || !strings.Contains(entries[0].Name(), uasec.Thumbprint(tt.der)) {
					t.Fatalf("rejected copy %s is not the certificate", entries[0].Name())
				}
				if !strings.Contains(u.Error(), rejected) || !strings.Contains(u.Error(), trusted) {
					t.Fatalf("the refusal does not say where the copy is and where to move it: %v", u)
				}
			}
		})
	}

	t.Run("a file in the trusted folder that is no certificate refuses everyone, naming it", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "listed.der"), listedDER.Raw)
		writeFile(t, filepath.Join(dir, "notes.txt"), []byte("put certificates here"))
		err := (&trustList{trusted: dir}).check(listedDER.Raw, now)
		if err == nil || !strings.Contains(err.Error(), "notes.txt") {
			t.Fatalf("got %v, want a refusal naming notes.txt", err)
		}
	})
	t.Run("a missing trusted folder trusts no one", func(t *testing.T) {
		err := (&trustList{trusted: filepath.Join(t.TempDir(), "absent")}).check(listedDER.Raw, now)
		var u *untrustedError
		if !errors.As(err, &u) || u.code != ua.StatusBadCertificateUntrusted {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("the rejected folder stays bounded", func(t *testing.T) {
		rejected := t.TempDir()
		for i := range maxRejected {
			writeFile(t, filepath.Join(rejected, "old"+string(rune('a'+i%26))+strings.Repeat("x", i/26)+".der"), []byte{1})
		}
		_ = (&trustList{trusted: trusted, rejected: rejected}).check(stranger.Raw, now)
		if entries, _ := os.ReadDir(rejected); len(entries) != maxRejected {
			t.Fatalf("rejected folder grew to %d", len(entries))
		}
	})
}

// Real clients over TCP against a secure-only server that also allows
// anonymous users: an unknown certificate is refused and kept for the
// operator; moved to the trusted folder it works on the next attempt,
// without a restart; a None channel gets discovery only.
func TestSecureSessionsNeedATrustedCertificate(t *testing.T) {
	trusted, rejected := t.TempDir(), t.TempDir()
	ts := startServer(t, activeState(), func(c *Config) {
		c.Security = []SecurityProfile{{Policy: "Basic256Sha256", Mode: "SignAndEncrypt"}}
		c.AllowAnonymous = true
		c.TrustedClientsDir, c.RejectedClientsDir = trusted, rejected
	})
	clientKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	clientCert, err := SelfSignedCertificate("urn:scadad:test-hmi", "hmi", clientKey)
	if err != nil {
		t.Fatal(err)
	}
	opts := uasec.ClientOptions{SecurityPolicy: "Basic256Sha256", SecurityMode: "SignAndEncrypt", Certificate: clientCert, PrivateKey: clientKey, Timeout: 3 * time.Second}

	// Refused at the OpenSecureChannel, with an Error message
	// BadCertificateUntrusted (which gopcua's client reports as EOF).
	if _, err := ReadServiceLevel(context.Background(), ts.Endpoint(), opts); err == nil || !strings.Contains(err.Error(), "may not trust this client's certificate") {
		t.Fatalf("a session with an unknown client certificate: %v, want a refusal that says why it may be", err)
	}
	// Counted once the front has closed both sides, just after the
	// client saw its connection end.
	testwait.For(t, 5*time.Second, "the certificate refusal at the door counted", func() bool {
		return metricValue(t, ts.metrics.refused.WithLabelValues(refusedCertificate)) == 1
	})
	entries, err := os.ReadDir(rejected)
	if err != nil || len(entries) != 1 {
		t.Fatalf("rejected folder: %v %v", entries, err)
	}
	if err := os.Rename(filepath.Join(rejected, entries[0].Name()), filepath.Join(trusted, entries[0].Name())); err != nil {
		t.Fatal(err)
	}
	if lvl, err := ReadServiceLevel(context.Background(), ts.Endpoint(), opts); err != nil || lvl != LevelActive {
		t.Fatalf("after the operator trusted it: level %d, %v", lvl, err)
	}

	// A None channel: discovery answers (every client needs it to find
	// the secure endpoints), a session does not.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	eps, err := gopcua.GetEndpoints(ctx, ts.Endpoint())
	if err != nil || len(eps) != 1 || eps[0].SecurityMode != ua.MessageSecurityModeSignAndEncrypt {
		t.Fatalf("GetEndpoints over None: %v %v", eps, err)
	}
	c, err := gopcua.NewClient(ts.Endpoint(), gopcua.SecurityMode(ua.MessageSecurityModeNone), gopcua.AuthAnonymous(),
		gopcua.AutoReconnect(false), gopcua.DialTimeout(3*time.Second), gopcua.RequestTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Connect(ctx)
	defer c.Close(context.Background())
	if err == nil {
		t.Fatal("a session over None on a secure-only server")
	}
	// The front lets discovery through on a None channel and nothing
	// else: CreateSession ends the connection with an Error message
	// BadSecurityModeRejected (EOF to gopcua's client).
	testwait.For(t, 5*time.Second, "the refusal counted", func() bool {
		return metricValue(t, ts.metrics.refused.WithLabelValues(refusedMode)) == 1
	})
}

// uacpMessage frames body as an OPC UA TCP message of type typ ("MSGF").
func uacpMessage(typ string, body []byte) []byte {
	b := append([]byte(typ), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(b[4:], uint32(uacpHeaderLen+len(body)))
	return append(b, body...)
}

// openMessage is an OpenSecureChannel asking for policy (nil: a null
// string), followed by some bytes standing for the rest of it.
func openMessage(policy *string) []byte {
	body := binary.LittleEndian.AppendUint32(nil, 0) // secure channel id
	if policy == nil {
		body = binary.LittleEndian.AppendUint32(body, 0xFFFFFFFF)
	} else {
		body = binary.LittleEndian.AppendUint32(body, uint32(len(*policy)))
		body = append(body, *policy...)
	}
	return uacpMessage("OPNF", append(body, bytes.Repeat([]byte{0xAB}, 300)...))
}

// symmetricMessage is a MSG message with body after the 16 bytes of
// channel, token and sequence headers, and a 32-byte stand-in signature.
func symmetricMessage(body []byte) []byte {
	rest := make([]byte, 16, 16+len(body)+32)
	rest = append(append(rest, body...), bytes.Repeat([]byte{0x5A}, 32)...)
	return uacpMessage("MSGF", rest)
}

// encodeRequest is req's body on the wire, as a client sends it in clear:
// its type id, then the request.
func encodeRequest(t *testing.T, req any) []byte {
	t.Helper()
	id, err := ua.NewFourByteNodeID(0, ua.ServiceTypeID(req)).Encode()
	if err != nil {
		t.Fatal(err)
	}
	b, err := ua.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	return append(id, b...)
}

// requestHeader is a client's plain request header.
func requestHeader() *ua.RequestHeader {
	return &ua.RequestHeader{AuthenticationToken: ua.NewTwoByteNodeID(0), Timestamp: time.Now(), AdditionalHeader: ua.NewExtensionObject(nil)}
}

// plainCreateSession is a CreateSessionRequest body as a client on a
// signed-only channel sends it.
func plainCreateSession(t *testing.T) []byte {
	t.Helper()
	return encodeRequest(t, &ua.CreateSessionRequest{RequestHeader: requestHeader(),
		ClientDescription: &ua.ApplicationDescription{ApplicationURI: "urn:test", ApplicationName: &ua.LocalizedText{Text: "test"}},
		SessionName:       "s", RequestedSessionTimeout: 60000})
}

// The front refuses an OpenSecureChannel for a policy not offered or with
// a null policy before anything reaches the library, and a message it
// cannot open (here an OpenSecureChannel for an offered policy whose
// "encrypted" part is filler) too. Real clients: TestChannelWithAPolicyNotOfferedRefused
// (Sign where only SignAndEncrypt is offered, Basic128Rsa15 not offered).
func TestCopyRequestsChecksTheChannel(t *testing.T) {
	offered, weak := ua.SecurityPolicyURIBasic256Sha256, ua.SecurityPolicyURIBasic128Rsa15
	rules := channelRules{policies: map[string]bool{offered: true, ua.SecurityPolicyURINone: true}}
	msg := symmetricMessage(plainCreateSession(t))
	tests := []struct {
		name    string
		in      [][]byte
		refused string
		label   string
	}{
		{"policy not offered", [][]byte{openMessage(&weak), msg}, weak, refusedPolicy},
		{"null policy", [][]byte{openMessage(nil)}, "", refusedPolicy},
		{"offered policy, filler for its ciphertext", [][]byte{openMessage(&offered), msg}, "", refusedSecurity},
		{"a request before any OpenSecureChannel", [][]byte{msg}, "", refusedSecurity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, frontClient := tcpPair(t)
			frontLibrary, library := tcpPair(t)
			done := make(chan error, 1)
			go func() { done <- copyRequests(frontLibrary, frontClient, rules, newChannelRelay(testKey(), nil)) }()
			go func() {
				for _, m := range tt.in {
					if _, err := client.Write(m); err != nil {
						return
					}
				}
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("copyRequests did not end")
			}
			frontLibrary.Close()
			if got, _ := io.ReadAll(library); len(got) != 0 {
				t.Fatalf("library got %d bytes, want none", len(got))
			}
			var refused *channelRefusedError
			if !errors.As(err, &refused) || refused.policy != tt.refused || refused.reason() != tt.label {
				t.Fatalf("ended with %v, want a refusal (%s) of %q", err, tt.label, tt.refused)
			}
			frontClient.Close()
			answer, _ := io.ReadAll(client)
			if !bytes.HasPrefix(answer, []byte("ERRF")) || ua.StatusCode(binary.LittleEndian.Uint32(answer[8:])) != refused.status() {
				t.Fatalf("client got %q, want an Error message with %v", answer, refused.status())
			}
		})
	}
}

// The Error message an untrusted client gets says what is wrong, never
// where the server keeps its files (issue 22, defect 5); the operator's
// log line says where to put the certificate.
func TestCertificateRefusalNamesNoPaths(t *testing.T) {
	clientCert, _ := trustedClient(t)
	tl := trustList{trusted: filepath.Join(t.TempDir(), "pki", "trusted"), rejected: filepath.Join(t.TempDir(), "pki", "rejected")}
	policy := ua.SecurityPolicyURIBasic256Sha256
	rules := channelRules{policies: map[string]bool{policy: true}, trusts: func(der []byte) error { return tl.check(der, time.Now()) }}
	client, frontClient := tcpPair(t)
	frontLibrary, _ := tcpPair(t)
	done := make(chan error, 1)
	go func() { done <- copyRequests(frontLibrary, frontClient, rules, newChannelRelay(testKey(), nil)) }()
	opn := openHeader('F', 0, policy, clientCert, nil)
	opn = append(opn, bytes.Repeat([]byte{0xAB}, 256)...)
	binary.LittleEndian.PutUint32(opn[4:], uint32(len(opn)))
	if _, err := client.Write(opn); err != nil {
		t.Fatal(err)
	}
	var refused *channelRefusedError
	select {
	case err := <-done:
		if !errors.As(err, &refused) || refused.reason() != refusedCertificate {
			t.Fatalf("ended with %v, want a certificate refusal", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("copyRequests did not end")
	}
	frontClient.Close()
	answer, _ := io.ReadAll(client)
	if !bytes.HasPrefix(answer, []byte("ERRF")) || !bytes.Contains(answer, []byte("not trusted")) {
		t.Fatalf("client got %q, want an Error message saying the certificate is not trusted", answer)
	}
	for _, dir := range []string{tl.trusted, tl.rejected, "pki", "/"} {
		if bytes.Contains(answer[16:], []byte(dir)) {
			t.Errorf("the client's Error message %q names %q", answer[16:], dir)
		}
	}
	if log := refused.logReason(); !strings.Contains(log, tl.trusted) || !strings.Contains(log, tl.rejected) {
		t.Errorf("the operator's log reason %q does not say where to put the certificate", log)
	}
}

// A trusted client asking for a policy the server does not offer (here
// the deprecated Basic128Rsa15, which the library would serve) is refused
// at the channel, with a real gopcua client.
func TestChannelWithAPolicyNotOfferedRefused(t *testing.T) {
	clientCert, trusted := trustedClient(t)
	ts := startServer(t, activeState(), func(c *Config) {
		c.Security = []SecurityProfile{{Policy: "Basic256Sha256", Mode: "SignAndEncrypt"}}
		c.TrustedClientsDir = trusted
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	eps, err := gopcua.GetEndpoints(ctx, ts.Endpoint())
	if err != nil || len(eps) == 0 {
		t.Fatal(eps, err)
	}
	for _, policy := range []string{ua.SecurityPolicyURIBasic128Rsa15, ua.SecurityPolicyURIBasic256Sha256} {
		c, err := gopcua.NewClient(ts.Endpoint(),
			gopcua.SecurityPolicy(policy), gopcua.SecurityMode(ua.MessageSecurityModeSignAndEncrypt),
			gopcua.Certificate(clientCert), gopcua.PrivateKey(testKey()), gopcua.RemoteCertificate(eps[0].ServerCertificate),
			gopcua.AuthAnonymous(), gopcua.SecurityFromEndpoint(eps[0], ua.UserTokenTypeAnonymous),
			gopcua.SecurityPolicy(policy), // after SecurityFromEndpoint, which sets its own
			gopcua.AutoReconnect(false), gopcua.DialTimeout(3*time.Second), gopcua.RequestTimeout(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		err = c.Connect(ctx)
		c.Close(context.Background())
		if policy == ua.SecurityPolicyURIBasic256Sha256 {
			if err != nil {
				t.Fatalf("the offered policy: %v", err)
			}
			continue
		}
		if err == nil {
			t.Fatalf("a channel with %s was served", policy)
		}
	}
	testwait.For(t, 5*time.Second, "the policy refusal counted", func() bool {
		return metricValue(t, ts.metrics.refused.WithLabelValues(refusedPolicy)) == 1
	})

	// Sign on a server that offers Basic256Sha256 with SignAndEncrypt
	// only: the library would serve it; the front refuses it.
	c, err := gopcua.NewClient(ts.Endpoint(),
		gopcua.Certificate(clientCert), gopcua.PrivateKey(testKey()), gopcua.RemoteCertificate(eps[0].ServerCertificate),
		gopcua.AuthAnonymous(), gopcua.SecurityFromEndpoint(eps[0], ua.UserTokenTypeAnonymous),
		gopcua.SecurityMode(ua.MessageSecurityModeSign), // after SecurityFromEndpoint, which sets its own
		gopcua.AutoReconnect(false), gopcua.DialTimeout(3*time.Second), gopcua.RequestTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Connect(ctx)
	c.Close(context.Background())
	if err == nil {
		t.Fatal("a signed-only channel was served where only SignAndEncrypt is offered")
	}
	// Counted once the front has closed both sides, just after the
	// client saw its connection end.
	testwait.For(t, 5*time.Second, "the mode refusal counted", func() bool {
		return metricValue(t, ts.metrics.refused.WithLabelValues(refusedMode)) == 1
	})
}

// gopcua's client takes the server's certificate from GetEndpoints and
// checks nothing: a client given the server's certificate (or its CA)
// refuses any other.
func TestClientChecksTheServerCertificate(t *testing.T) {
	clientCert, trusted := trustedClient(t)
	serverCert, err := SelfSignedCertificate("urn:scadad:node:a", "127.0.0.1", testKey())
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, activeState(), func(c *Config) {
		c.Security = []SecurityProfile{{Policy: "Basic256Sha256", Mode: "SignAndEncrypt"}}
		c.TrustedClientsDir = trusted
		c.Certificate, c.ApplicationURI = serverCert, "urn:scadad:node:a"
	})
	parsed, err := x509.ParseCertificate(serverCert)
	if err != nil {
		t.Fatal(err)
	}
	other := issue(t, "urn:scadad:node:impostor", testKey(), nil, nil, false, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	base := uasec.ClientOptions{SecurityPolicy: "Basic256Sha256", SecurityMode: "SignAndEncrypt", Certificate: clientCert, PrivateKey: testKey(), Timeout: 3 * time.Second}
	tests := []struct {
		name    string
		servers []*x509.Certificate
		wantErr string
	}{
		{"none configured: any", nil, ""},
		{"the server's own", []*x509.Certificate{parsed}, ""},
		{"another one", []*x509.Certificate{other}, "not the one configured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base
			o.ServerCertificates = tt.servers
			lvl, err := ReadServiceLevel(context.Background(), ts.Endpoint(), o)
			if tt.wantErr == "" {
				if err != nil || lvl != LevelActive {
					t.Fatalf("level %d, %v", lvl, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestDiscoveryRequest(t *testing.T) {
	withAdditional := requestHeader()
	withAdditional.AdditionalHeader = ua.NewExtensionObject(&ua.Argument{Name: "x", DataType: ua.NewTwoByteNodeID(11), ArrayDimensions: []uint32{1}, Description: &ua.LocalizedText{}})
	stringToken := requestHeader()
	stringToken.AuthenticationToken = ua.NewStringNodeID(3, "session-token")
	getEndpoints := encodeRequest(t, &ua.GetEndpointsRequest{RequestHeader: requestHeader(), EndpointURL: "opc.tcp://x:4840"})
	tests := []struct {
		name string
		body []byte
		ok   bool
	}{
		{"GetEndpoints", getEndpoints, true},
		{"FindServers", encodeRequest(t, &ua.FindServersRequest{RequestHeader: requestHeader(), EndpointURL: "opc.tcp://x:4840"}), true},
		{"CloseSecureChannel", encodeRequest(t, &ua.CloseSecureChannelRequest{RequestHeader: requestHeader()}), true},
		{"GetEndpoints with a string token", encodeRequest(t, &ua.GetEndpointsRequest{RequestHeader: stringToken, EndpointURL: "opc.tcp://x:4840"}), true},
		{"CreateSession", plainCreateSession(t), false},
		{"GetEndpoints with an AdditionalHeader", encodeRequest(t, &ua.GetEndpointsRequest{RequestHeader: withAdditional, EndpointURL: "opc.tcp://x:4840"}), false},
		{"truncated header", getEndpoints[:9], false},
		{"no type id", []byte{0, 1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			why := discoveryRequest(tt.body)
			if (why == "") != tt.ok {
				t.Fatalf("discoveryRequest = %q, want ok %v", why, tt.ok)
			}
		})
	}
}
