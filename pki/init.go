package pki

import (
	"crypto/ecdsa"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/scadad/scadad/internal/atomicfile"
)

// ErrCAExists is returned by Init when dir already holds a CA and
// WithOverwrite was not given: replacing a CA cuts every issued certificate
// off the site, so it must be asked for.
var ErrCAExists = errors.New("site CA already exists")

// InitOption adjusts Init.
type InitOption func(*initOptions)

type initOptions struct {
	overwrite  bool
	extraSANs  map[string][]string
	caValidity time.Duration
}

// WithCAValidity makes the site CA valid for d instead of Init's validity,
// which then applies to the node and client certificates only. A CA that
// outlives its certificates lets them be renewed one node at a time (certs
// issue --overwrite, a restart of that node); a CA that lapses with them
// needs a new CA and a restart of every node at once.
func WithCAValidity(d time.Duration) InitOption { return func(o *initOptions) { o.caValidity = d } }

// WithOverwrite lets Init replace an existing CA and certificates.
func WithOverwrite() InitOption { return func(o *initOptions) { o.overwrite = true } }

// WithExtraSANs adds host names or IP addresses to the certificate of the
// node called name (for example the address its peers dial).
func WithExtraSANs(name string, sans ...string) InitOption {
	return func(o *initOptions) {
		if o.extraSANs == nil {
			o.extraSANs = make(map[string][]string)
		}
		o.extraSANs[name] = append(o.extraSANs[name], sans...)
	}
}

// Init writes a new site PKI into dir: ca.crt/ca.key and <name>.crt/<name>.key
// for every node and client (the clients as admins), and the issuance
// record, valid for validity (the CA too, unless
// WithCAValidity says otherwise). Keys are written 0600. It
// refuses to touch a dir that already holds ca.crt unless WithOverwrite is
// given.
func Init(dir string, site string, nodes []string, clients []string, validity time.Duration, opts ...InitOption) error {
	var o initOptions
	for _, opt := range opts {
		opt(&o)
	}
	if validity <= 0 {
		return fmt.Errorf("init PKI in %s: %w: validity %s must be positive", dir, ErrInvalidInput, validity)
	}
	if o.caValidity == 0 {
		o.caValidity = validity
	}
	if o.caValidity < validity {
		return fmt.Errorf("init PKI in %s: %w: the CA's validity %s is shorter than its certificates' %s", dir, ErrInvalidInput, o.caValidity, validity)
	}
	if err := checkNames(append(append([]string{}, nodes...), clients...)); err != nil {
		return fmt.Errorf("init PKI in %s: %w", dir, err)
	}
	caCert := filepath.Join(dir, "ca.crt")
	if _, err := os.Stat(caCert); err == nil && !o.overwrite {
		return fmt.Errorf("init PKI in %s: %w (%s); replacing it cuts every issued certificate off the site: pass --overwrite (WithOverwrite) if that is meant, or certs issue to add a certificate", dir, ErrCAExists, caCert)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("init PKI in %s: check %s: %w", dir, caCert, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("init PKI: create %s: %w", dir, err)
	}
	now := time.Now()
	notAfter := now.Add(validity)
	ca, err := GenerateCA(site, time.Time{}, now.Add(o.caValidity))
	if err != nil {
		return fmt.Errorf("init PKI in %s: %w", dir, err)
	}
	if err := writePair(dir, "ca", ca.CertPEM, ca.KeyPEM); err != nil {
		return err
	}
	// A new CA starts a new record: what the old one signed is off the site.
	if err := os.Remove(filepath.Join(dir, IssuedFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("init PKI in %s: reset the issuance record: %w", dir, err)
	}
	for _, n := range nodes {
		leaf, err := ca.Issue(LeafSpec{Name: n, Usage: NodeUsage, NotAfter: notAfter, ExtraSANs: o.extraSANs[n]})
		if err != nil {
			return fmt.Errorf("init PKI in %s: %w", dir, err)
		}
		if err := writePair(dir, n, leaf.CertPEM, leaf.KeyPEM); err != nil {
			return err
		}
		if err := recordIssued(dir, leaf, NodeUsage, RoleNone); err != nil {
			return err
		}
	}
	for _, c := range clients {
		// The first operators are the site's admins: someone must be able
		// to issue the rest.
		leaf, err := ca.Issue(LeafSpec{Name: c, Usage: ClientUsage, Role: RoleAdmin, NotAfter: notAfter, ExtraSANs: o.extraSANs[c]})
		if err != nil {
			return fmt.Errorf("init PKI in %s: %w", dir, err)
		}
		if err := writePair(dir, c, leaf.CertPEM, leaf.KeyPEM); err != nil {
			return err
		}
		if err := recordIssued(dir, leaf, ClientUsage, RoleAdmin); err != nil {
			return err
		}
	}
	return nil
}

func checkNames(names []string) error {
	seen := map[string]bool{"ca": true}
	for _, n := range names {
		if n == "" || n != filepath.Base(n) || n == "." || n == ".." {
			return fmt.Errorf("%w: name %q cannot be a file name", ErrInvalidInput, n)
		}
		if seen[n] {
			return fmt.Errorf("%w: name %q used twice (or clashes with the CA)", ErrInvalidInput, n)
		}
		seen[n] = true
	}
	return nil
}

// writePair writes the key before the certificate and each through a temp
// file and rename, so a crash never leaves a certificate without its key.
func writePair(dir, name string, certPEM, keyPEM []byte) error {
	if err := atomicfile.Write(filepath.Join(dir, name+".key"), keyPEM, 0o600); err != nil {
		return fmt.Errorf("write key for %q: %w", name, err)
	}
	if err := atomicfile.Write(filepath.Join(dir, name+".crt"), certPEM, 0o644); err != nil {
		return fmt.Errorf("write certificate for %q: %w", name, err)
	}
	return nil
}

// ErrLeafExists is returned by Issue when dir already holds a certificate
// of that name and overwrite was not asked for.
var ErrLeafExists = errors.New("certificate already exists")

// Issue signs one more certificate with the site CA kept in dir (ca.crt and
// ca.key, as Init writes them) and writes <name>.crt/<name>.key beside it:
// a replacement node, a new operator with role (RoleNone for a node). Its
// validity ends no later than the CA's. An existing certificate of that
// name is replaced only with overwrite. The issuance record gets a line.
func Issue(dir, name string, usage Usage, role Role, validity time.Duration, overwrite bool, extraSANs ...string) error {
	return IssueLimited(dir, name, usage, role, nil, validity, overwrite, extraSANs...)
}

// IssueLimited is Issue for a client certificate limited to targets on the
// HTTP listener (none: any target).
func IssueLimited(dir, name string, usage Usage, role Role, targets []string, validity time.Duration, overwrite bool, extraSANs ...string) error {
	if validity <= 0 {
		return fmt.Errorf("issue %q in %s: %w: validity %s must be positive", name, dir, ErrInvalidInput, validity)
	}
	if err := checkNames([]string{name}); err != nil {
		return fmt.Errorf("issue %q in %s: %w", name, dir, err)
	}
	certPath := filepath.Join(dir, name+".crt")
	if _, err := os.Stat(certPath); err == nil && !overwrite {
		return fmt.Errorf("issue %q in %s: %w (%s); pass --overwrite to replace it", name, dir, ErrLeafExists, certPath)
	}
	caCert, err := readCert(filepath.Join(dir, "ca.crt"), "site CA certificate")
	if err != nil {
		return fmt.Errorf("issue %q: %w", name, err)
	}
	signer, err := readKey(filepath.Join(dir, "ca.key"))
	if err != nil {
		return fmt.Errorf("issue %q with the site CA: %w", name, err)
	}
	key, ok := signer.(*ecdsa.PrivateKey)
	if !ok || !publicKeysEqual(key.Public(), caCert.PublicKey) {
		return fmt.Errorf("issue %q: %w: ca.key in %s is not the key of ca.crt", name, ErrInvalidInput, dir)
	}
	now := time.Now()
	if now.After(caCert.NotAfter) {
		return fmt.Errorf("issue %q: %w: the site CA in %s expired %s", name, ErrInvalidInput, dir, caCert.NotAfter.Format(time.RFC3339))
	}
	notAfter := now.Add(validity)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter
	}
	ca := &CA{Cert: caCert, Key: key}
	leaf, err := ca.Issue(LeafSpec{Name: name, Usage: usage, Role: role, Targets: targets, NotAfter: notAfter, ExtraSANs: extraSANs})
	if err != nil {
		return fmt.Errorf("issue %q in %s: %w", name, dir, err)
	}
	if err := writePair(dir, name, leaf.CertPEM, leaf.KeyPEM); err != nil {
		return err
	}
	return recordIssued(dir, leaf, usage, role)
}
