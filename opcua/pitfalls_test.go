package opcua

import (
	"context"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/server"
	"github.com/gopcua/opcua/ua"
)

// These tests pin the gopcua server defects (v0.8.0, still in v0.9.0) that WORKAROUNDS.md
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
		{0, time.Minute}, // the library's default
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
