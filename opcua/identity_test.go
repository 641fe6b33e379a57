package opcua

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uapolicy"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/uasec"
)

func TestUserNameIdentityOverBasic256Sha256(t *testing.T) {
	clientCert, trusted := trustedClient(t)
	ts := startServer(t, activeState(), func(c *Config) {
		c.Security = []SecurityProfile{{Policy: "Basic256Sha256", Mode: "SignAndEncrypt"}, {Policy: "Basic256Sha256", Mode: "Sign"}}
		c.AllowAnonymous = false
		c.Users = []User{{Name: "operator", Password: "s3cret"}}
		c.TrustedClientsDir = trusted
	})
	base := uasec.ClientOptions{SecurityPolicy: "Basic256Sha256", SecurityMode: "SignAndEncrypt", Certificate: clientCert, PrivateKey: testKey(), Timeout: 3 * time.Second}
	with := func(f func(*uasec.ClientOptions)) uasec.ClientOptions { o := base; f(&o); return o }
	tests := []struct {
		name string
		opts uasec.ClientOptions
		ok   bool
	}{
		{"right password, encrypted", with(func(o *uasec.ClientOptions) { o.Username, o.Password = "operator", "s3cret" }), true},
		{"right password, signed", with(func(o *uasec.ClientOptions) { o.SecurityMode = "Sign"; o.Username, o.Password = "operator", "s3cret" }), true},
		{"wrong password", with(func(o *uasec.ClientOptions) { o.Username, o.Password = "operator", "guess" }), false},
		{"unknown user", with(func(o *uasec.ClientOptions) { o.Username, o.Password = "mallory", "s3cret" }), false},
		{"password prefix", with(func(o *uasec.ClientOptions) { o.Username, o.Password = "operator", "s3cre" }), false},
		{"anonymous when anonymous is off", base, false},
		{"no security at all", uasec.ClientOptions{Timeout: 3 * time.Second}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lvl, err := ReadServiceLevel(context.Background(), ts.Endpoint(), tt.opts)
			if tt.ok && (err != nil || lvl != LevelActive) {
				t.Fatalf("want access: level %d err %v", lvl, err)
			}
			if !tt.ok && err == nil {
				t.Fatalf("want refusal, read level %d", lvl)
			}
		})
	}
}

// Writes need an identity allowed to write, over real secure sessions:
// a user without can_write reads but does not write, whatever the role.
func TestWritesNeedAnIdentityThatMayWrite(t *testing.T) {
	clientCert, trusted := trustedClient(t)
	ts := startServer(t, activeState(), func(c *Config) {
		c.Security = []SecurityProfile{{Policy: "Basic256Sha256", Mode: "SignAndEncrypt"}}
		c.AllowAnonymous, c.AnonymousCanWrite = true, false
		c.Users = []User{{Name: "operator", Password: "op", CanWrite: true}, {Name: "viewer", Password: "view"}}
		c.TrustedClientsDir = trusted
	})
	base := uasec.ClientOptions{SecurityPolicy: "Basic256Sha256", SecurityMode: "SignAndEncrypt", Certificate: clientCert, PrivateKey: testKey(), Timeout: 3 * time.Second}
	tests := []struct {
		name, user, pass string
		want             ua.StatusCode
	}{
		{"user with can_write", "operator", "op", ua.StatusOK},
		{"user without can_write", "viewer", "view", ua.StatusBadUserAccessDenied},
		{"anonymous without anonymous_can_write", "", "", ua.StatusBadUserAccessDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base
			o.Username, o.Password = tt.user, tt.pass
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := uasec.Dial(ctx, ts.Endpoint(), o)
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close(c)
			before := len(ts.writer.Calls())
			if got := writeValue(t, c, ts.NodeID("Pump1", "Speed"), ua.AttributeIDValue, ua.MustVariant(3.5)); got != tt.want {
				t.Fatalf("write as %q: %v, want %v", tt.user, got, tt.want)
			}
			reached := len(ts.writer.Calls()) > before
			if reached != (tt.want == ua.StatusOK) {
				t.Fatalf("write as %q reached the gateway: %v", tt.user, reached)
			}
			if v := readValue(t, c, ts.NodeID("Pump1", "Speed"), ua.AttributeIDValue); v == nil {
				t.Fatal("read refused")
			}
		})
	}
	if got := metricValue(t, ts.metrics.denied.WithLabelValues("read-only-identity")); got != 2 {
		t.Fatalf("read-only-identity denials counted %v, want 2", got)
	}
}

func TestConfigValidation(t *testing.T) {
	ok := func() Config {
		return Config{Host: "127.0.0.1", Port: 4840, AllowAnonymous: true, PrivateKey: testKey()}
	}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"valid lab config", func(*Config) {}, ""},
		{"no port", func(c *Config) { c.Port = 0 }, "port"},
		{"no identity", func(c *Config) { c.AllowAnonymous = false }, "no identity"},
		{"users without a secure profile", func(c *Config) { c.Users = []User{{Name: "u", Password: "p"}} }, "need a Sign"},
		{"user without password", func(c *Config) {
			c.Security = []SecurityProfile{{Policy: "Basic256Sha256", Mode: "Sign"}}
			c.TrustedClientsDir = t.TempDir()
			c.Users = []User{{Name: "u"}}
		}, "needs a name and a password"},
		{"secure and lab profiles together", func(c *Config) {
			c.Security = []SecurityProfile{{Policy: "None", Mode: "None"}, {Policy: "Basic256Sha256", Mode: "SignAndEncrypt"}}
			c.TrustedClientsDir = t.TempDir()
		}, ""},
		{"secure profile without trusted clients", func(c *Config) {
			c.Security = []SecurityProfile{{Policy: "Basic256Sha256", Mode: "SignAndEncrypt"}}
		}, "trusted client certificates"},
		{"unknown policy", func(c *Config) { c.Security = []SecurityProfile{{Policy: "Rot13", Mode: "Sign"}} }, "not supported"},
		{"secure policy with mode None", func(c *Config) { c.Security = []SecurityProfile{{Policy: "Basic256Sha256", Mode: "None"}} }, "needs mode"},
		{"bad mode", func(c *Config) { c.Security = []SecurityProfile{{Policy: "None", Mode: "Loud"}} }, "security mode"},
		{"certificate URI mismatch", func(c *Config) {
			cert, err := SelfSignedCertificate("urn:one", "h", testKey())
			if err != nil {
				t.Fatal(err)
			}
			c.Certificate, c.ApplicationURI = cert, "urn:two"
		}, "does not match"},
		{"missing cert file", func(c *Config) { c.CertFile = "/nonexistent/cert.pem" }, "read certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok()
			tt.mutate(&c)
			_, err := New(c, Deps{Logger: zerolog.Nop(), Roles: role.NewBroadcaster(role.State{}), Writer: &fakeWriter{}})
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// encryptUserPassword does what a client does with a user-name token.
func encryptUserPassword(t *testing.T, policy string, pub *rsa.PublicKey, password string, nonce []byte) []byte {
	t.Helper()
	enc, err := uapolicy.Asymmetric(policy, nil, pub)
	if err != nil {
		t.Fatal(err)
	}
	plain := binary.LittleEndian.AppendUint32(nil, uint32(len(password)+len(nonce)))
	plain = append(append(plain, password...), nonce...)
	secret, err := enc.Encrypt(plain)
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

func TestDecryptUserPassword(t *testing.T) {
	key := testKey()
	nonce := bytes.Repeat([]byte{7}, 32)
	otherNonce := bytes.Repeat([]byte{8}, 32)
	tests := []struct {
		name     string
		policy   string
		secret   []byte
		nonce    []byte
		want     string
		wantFail bool
	}{
		{"basic256sha256", ua.SecurityPolicyURIBasic256Sha256, encryptUserPassword(t, ua.SecurityPolicyURIBasic256Sha256, &key.PublicKey, "s3cret", nonce), nonce, "s3cret", false},
		{"empty password", ua.SecurityPolicyURIBasic256Sha256, encryptUserPassword(t, ua.SecurityPolicyURIBasic256Sha256, &key.PublicKey, "", nonce), nonce, "", false},
		{"replayed with another session's nonce", ua.SecurityPolicyURIBasic256Sha256, encryptUserPassword(t, ua.SecurityPolicyURIBasic256Sha256, &key.PublicKey, "s3cret", otherNonce), nonce, "", true},
		{"policy None never accepted", ua.SecurityPolicyURINone, []byte("s3cret"), nonce, "", true},
		{"unknown policy", "", []byte("s3cret"), nonce, "", true},
		{"garbage ciphertext", ua.SecurityPolicyURIBasic256Sha256, bytes.Repeat([]byte{1}, 256), nonce, "", true},
		{"no nonce recorded", ua.SecurityPolicyURIBasic256Sha256, encryptUserPassword(t, ua.SecurityPolicyURIBasic256Sha256, &key.PublicKey, "s3cret", nonce), nil, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decryptUserPassword(key, tt.policy, tt.secret, tt.nonce)
			if tt.wantFail {
				if err == nil {
					t.Fatalf("decrypted %q, want an error", got)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("got %q %v, want %q", got, err, tt.want)
			}
		})
	}
}

func TestMatchUser(t *testing.T) {
	users := []User{{Name: "operator", Password: "s3cret"}, {Name: "eng", Password: "other"}}
	tests := []struct {
		name, user, pass string
		want             bool
	}{
		{"first user", "operator", "s3cret", true},
		{"second user", "eng", "other", true},
		{"wrong password", "operator", "other", false},
		{"password prefix", "operator", "s3cre", false},
		{"password of another user", "eng", "s3cret", false},
		{"unknown user", "root", "s3cret", false},
		{"empty", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if u, got := matchUser(users, tt.user, []byte(tt.pass)); got != tt.want || (got && u.Name != tt.user) {
				t.Fatalf("matchUser(%q, %q) = %v", tt.user, tt.pass, got)
			}
		})
	}
}

func TestAnonymousIdentityFollowsConfig(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	if id, code := ts.checkIdentity(nil, nil); code != ua.StatusOK || id.name != "anonymous" || !id.canWrite {
		t.Fatalf("null token with anonymous allowed (and writing): %+v %v", id, code)
	}
	ts.cfg.AnonymousCanWrite = false
	if id, code := ts.checkIdentity(nil, nil); code != ua.StatusOK || id.canWrite {
		t.Fatalf("anonymous without anonymous_can_write: %+v %v", id, code)
	}
	if _, code := ts.checkIdentity(ua.NewExtensionObject(&ua.AnonymousIdentityToken{PolicyID: "anonymous"}), nil); code != ua.StatusOK {
		t.Fatalf("anonymous token refused: %v", code)
	}
	if _, code := ts.checkIdentity(ua.NewExtensionObject(&ua.UserNameIdentityToken{UserName: "x"}), nil); code != ua.StatusBadIdentityTokenRejected {
		t.Fatalf("user token with no users configured: %v", code)
	}
	if _, code := ts.checkIdentity(ua.NewExtensionObject(&ua.X509IdentityToken{}), nil); code != ua.StatusBadIdentityTokenInvalid {
		t.Fatalf("certificate token: %v", code)
	}
	ts.cfg.AllowAnonymous = false
	if _, code := ts.checkIdentity(nil, nil); code != ua.StatusBadIdentityTokenRejected {
		t.Fatalf("null token with anonymous off: %v", code)
	}
}
