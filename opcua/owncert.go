package opcua

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"

	"github.com/scadad/scadad/internal/atomicfile"
)

// OwnCertificate returns the files of a self-signed application
// certificate for appURI kept under pkiDir (own/cert.der and
// private/key.pem), making them on first use. A server that made a new
// certificate at every start would be a stranger to every client that had
// trusted it. Kept files whose URI is not appURI are an error naming them:
// the node's identity changed, and the operator decides.
func OwnCertificate(pkiDir, appURI, host string) (certFile, keyFile string, err error) {
	certFile = filepath.Join(pkiDir, "own", "cert.der")
	keyFile = filepath.Join(pkiDir, "private", "key.pem")
	_, certErr := os.Stat(certFile)
	_, keyErr := os.Stat(keyFile)
	if certErr == nil && keyErr == nil {
		c := Config{CertFile: certFile, KeyFile: keyFile, ApplicationURI: appURI}
		if _, _, err := loadIdentity(&c); err != nil {
			return "", "", fmt.Errorf("own OPC UA certificate %s: %w (remove both files to have a new one made)", certFile, err)
		}
		return certFile, keyFile, nil
	}
	// One without the other is no identity (a crash between the two
	// writes below leaves the key alone): a new pair is made.
	if err := WriteSelfSigned(certFile, keyFile, appURI, host); err != nil {
		return "", "", fmt.Errorf("own OPC UA certificate: %w", err)
	}
	return certFile, keyFile, nil
}

// WriteSelfSigned makes a self-signed RSA-2048 application certificate
// for appURI (host as its DNS or IP name, when given) and writes it to
// certFile (DER) and its key to keyFile (PEM, mode 0600), replacing what
// is there.
func WriteSelfSigned(certFile, keyFile, appURI, host string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("generate key: %w", err)
	}
	der, err := SelfSignedCertificate(appURI, host, key)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := writeNew(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	return writeNew(certFile, der, 0o644)
}

// writeNew writes b to path (making its folder), so a crash leaves either
// no file or the whole one.
func writeNew(path string, b []byte, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	return atomicfile.Write(path, b, perm)
}
