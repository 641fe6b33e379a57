package opcua

import (
	"context"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/server"
	"github.com/gopcua/opcua/ua"
)

// These tests pin the gopcua v0.8.0 server defects that WORKAROUNDS.md
// describes, on a bare library server without our handlers. They assert the
// defect: when a library upgrade fixes one, its test fails and the
// workaround can be reviewed. (The unknown-namespace write panic is not
// reproduced here: it would kill the test binary.)

func startBareServer(t *testing.T) (*server.Server, string) {
	t.Helper()
	port := freePort(t)
	srv := server.New(
		server.EndPoint("127.0.0.1", port),
		server.EnableSecurity("None", ua.MessageSecurityModeNone),
		server.EnableAuthMode(ua.UserTokenTypeAnonymous),
	)
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(); cancel() })
	return srv, srv.URLs()[0]
}

func TestLibraryDefectStandardNodesUnsetAndWritable(t *testing.T) {
	_, url := startBareServer(t)
	c := connect(t, url)
	before := readValue(t, c, serviceLevelID, ua.AttributeIDValue)
	if before.Status == ua.StatusOK && before.Value != nil && before.Value.Value() != nil {
		t.Fatalf("library now gives ServiceLevel a value (%v): review WORKAROUNDS.md", before.Value.Value())
	}
	if got := writeValue(t, c, serviceLevelID, ua.AttributeIDValue, ua.MustVariant(byte(255))); got != ua.StatusOK {
		t.Fatalf("library now refuses an anonymous ServiceLevel write (%v): review WORKAROUNDS.md", got)
	}
	after := readValue(t, c, serviceLevelID, ua.AttributeIDValue)
	if after.Value == nil || after.Value.Value() != byte(255) {
		t.Fatalf("anonymous write to ServiceLevel did not stick: %v", after.Value)
	}
}

func TestLibraryDefectWritesNotTypeChecked(t *testing.T) {
	srv, url := startBareServer(t)
	ns := server.NewNodeNameSpace(srv, "urn:bare")
	n := ns.AddNewVariableStringNode("speed", 1.5)
	c := connect(t, url)
	if got := writeValue(t, c, n.ID(), ua.AttributeIDValue, ua.MustVariant("fast")); got != ua.StatusOK {
		t.Fatalf("library now type-checks writes (%v): review WORKAROUNDS.md", got)
	}
	if v := readValue(t, c, n.ID(), ua.AttributeIDValue); v.Value == nil || v.Value.Value() != "fast" {
		t.Fatalf("a String written into a Double node reads back %v", v.Value)
	}
}

func TestLibraryDefectChangeNotificationBeforeStart(t *testing.T) {
	srv := server.New(server.EndPoint("127.0.0.1", freePort(t)))
	panicked := func() (p bool) {
		defer func() { p = recover() != nil }()
		srv.ChangeNotification(serviceLevelID)
		return false
	}()
	if !panicked {
		t.Fatal("library ChangeNotification before Start no longer panics: review WORKAROUNDS.md")
	}
}

// The library compares the requested timeout, converted to a Duration,
// against limits written in milliseconds but typed as Durations (so in
// nanoseconds), falls back to a "60 s" default that is 60 µs, and reports
// that in milliseconds: 0 for any realistic request.
func TestLibraryDefectRevisedSessionTimeoutZero(t *testing.T) {
	_, url := startBareServer(t)
	for _, requested := range []time.Duration{time.Second, 20 * time.Minute} {
		c := connect(t, url, gopcua.SessionTimeout(requested))
		if got := c.Session().RevisedTimeout(); got != 0 {
			t.Fatalf("library now revises a %v request to %v: review WORKAROUNDS.md", requested, got)
		}
	}
}

func TestLibraryDefectApplicationURIOnlyFromCertificate(t *testing.T) {
	_, url := startBareServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	eps, err := gopcua.GetEndpoints(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) == 0 || eps[0].Server.ApplicationURI != "" {
		t.Fatalf("library now sets an ApplicationURI without a certificate: %+v", eps)
	}
}

// Our server: the ApplicationURI is always set (from a generated
// certificate when none is configured) and the revised session timeout is
// never 0.
func TestApplicationURIAndSessionTimeout(t *testing.T) {
	ts := startServer(t, activeState(), func(c *Config) { c.ApplicationURI = "urn:site:node-a" })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	eps, err := gopcua.GetEndpoints(ctx, ts.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) == 0 || eps[0].Server.ApplicationURI != "urn:site:node-a" || ts.ApplicationURI() != "urn:site:node-a" {
		t.Fatalf("application URI not advertised: %+v", eps[0].Server)
	}
	tests := []struct{ requested, want time.Duration }{
		{0, 10 * time.Second},
		{time.Second, 10 * time.Second},
		{20 * time.Minute, 20 * time.Minute},
		{10 * time.Hour, time.Hour},
	}
	for _, tt := range tests {
		c := connect(t, ts.Endpoint(), gopcua.SessionTimeout(tt.requested))
		if got := c.Session().RevisedTimeout(); got != tt.want {
			t.Fatalf("requested %v: revised session timeout %v, want %v", tt.requested, got, tt.want)
		}
	}
}

// gopcua v0.8.0's server opens every secure channel with the None policy
// and then cannot read the client's asymmetric OpenSecureChannel (upstream
// #815, fixed by #817 after v0.8.0). New refuses secure profiles while
// secureChannelsWork is false; this test flips when the library is fixed.
func TestLibraryDefectSecureChannel(t *testing.T) {
	port := freePort(t)
	cert, err := SelfSignedCertificate("urn:bare:secure", "127.0.0.1", testKey())
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(
		server.EndPoint("127.0.0.1", port),
		server.Certificate(cert), server.PrivateKey(testKey()),
		server.EnableSecurity("Basic256Sha256", ua.MessageSecurityModeSign),
		server.EnableAuthMode(ua.UserTokenTypeAnonymous),
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	_, err = ReadServiceLevel(context.Background(), srv.URLs()[0], ClientOptions{
		SecurityPolicy: "Basic256Sha256", SecurityMode: "Sign", Certificate: cert, PrivateKey: testKey(), Timeout: time.Second,
	})
	if secureChannelsWork && err != nil {
		t.Fatalf("secureChannelsWork is set but a Sign channel fails: %v", err)
	}
	if !secureChannelsWork && err == nil {
		t.Fatal("the library now completes a Sign secure channel: set secureChannelsWork and review WORKAROUNDS.md")
	}
}
