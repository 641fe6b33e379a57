package opcua

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOwnCertificate(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, err := OwnCertificate(dir, "urn:scadad:node:a", "scada-a")
	if err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(certFile)
	c := Config{CertFile: certFile, KeyFile: keyFile, ApplicationURI: "urn:scadad:node:a"}
	if _, _, err := loadIdentity(&c); err != nil {
		t.Fatalf("made certificate does not load as the server's: %v", err)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", fi, err)
	}

	// A restart keeps it: clients that trusted it still do.
	if _, _, err := OwnCertificate(dir, "urn:scadad:node:a", "scada-a"); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(certFile); !bytes.Equal(first, again) {
		t.Fatal("a second start made a new certificate")
	}

	// Another node id is another identity: refused, naming the file.
	if _, _, err := OwnCertificate(dir, "urn:scadad:node:b", "scada-a"); err == nil || !strings.Contains(err.Error(), certFile) {
		t.Fatalf("identity change: got %v, want an error naming %s", err, certFile)
	}

	// The key alone (a crash between the writes): a new pair.
	if err := os.Remove(certFile); err != nil {
		t.Fatal(err)
	}
	if _, _, err := OwnCertificate(dir, "urn:scadad:node:a", "scada-a"); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(certFile); len(again) == 0 || bytes.Equal(first, again) {
		t.Fatal("no new certificate after its file was lost")
	}
	if _, err := os.Stat(filepath.Join(dir, "own", "cert.der.tmp")); err == nil {
		t.Fatal("temporary file left behind")
	}
}
