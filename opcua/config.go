package opcua

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"github.com/scadad/scadad/activegate"
	"math/big"
	"net"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/clock"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/uasec"
)

// Config is the OPC UA server's configuration in plain Go; the daemon maps
// its YAML to it.
type Config struct {
	// Host and Port are where the server listens; the endpoint it advertises
	// is opc.tcp://Host:Port, so Host must be a name clients can reach.
	Host string
	Port int

	// ApplicationURI identifies this server in ServerArray. gopcua takes the
	// ApplicationUri only from the certificate, so it must match the
	// certificate's URI SAN; when no certificate is configured a self-signed
	// one carrying this URI is generated in memory.
	ApplicationURI  string
	ApplicationName string

	// NamespaceURI names the site namespace (default "urn:scadad:site"), and
	// SiteName the folder under Objects that holds the instances (default "Site").
	NamespaceURI string
	SiteName     string

	// Security lists the endpoint profiles. Empty means None/None (labs only).
	Security []SecurityProfile

	// CertFile and KeyFile (PEM or DER) hold the server certificate and RSA
	// key; Certificate (DER) and PrivateKey are the in-memory alternative.
	CertFile    string
	KeyFile     string
	Certificate []byte
	PrivateKey  *rsa.PrivateKey

	// TrustedClientsDir holds the client application certificates (DER or
	// PEM), or the CA certificates that issued them, that may open a
	// session on a Sign or SignAndEncrypt endpoint; it is read at each
	// such session. RejectedClientsDir receives a copy of each refused
	// certificate, for an operator to move into TrustedClientsDir.
	// TrustedClientsDir is required when a secure profile is configured.
	TrustedClientsDir  string
	RejectedClientsDir string
	// Trust is the replicated trust store, asked before the folder; a
	// secure profile needs it or TrustedClientsDir.
	Trust TrustStore

	// AllowAnonymous enables the anonymous identity; Users enables
	// user-name identities (they need a secure profile so passwords are
	// never sent in clear).
	AllowAnonymous bool
	Users          []User
	// UserStore holds the site's replicated user-name identities, by
	// password hash; asked at every ActivateSession, after Users (the
	// per-node password files of earlier releases). With a secure
	// profile, it enables user-name logins.
	UserStore UserStore
	// MaxSessions caps activated client sessions (0: no cap); more are
	// refused BadTooManySessions. Sessions idle for their timeout expire.
	MaxSessions int
	// MaxConnections and MaxConnectionsPerAddress bound the TCP
	// connections open at once, in total and from one client address
	// (0: no bound): over either a connection is reset as accepted and
	// counted (scadad_opcua_connections_refused_total, reason total or
	// per_address), so a flood spends this listener's descriptors only.
	MaxConnections           int
	MaxConnectionsPerAddress int
	// AnonymousCanWrite lets anonymous sessions' writes on to the role
	// gate (labs); otherwise only users with CanWrite write.
	AnonymousCanWrite bool

	// Peers are the other servers of the redundant set, for ServerArray and
	// ServerUriArray.
	Peers []Peer
	// HotStandby advertises RedundancySupport Hot instead of Warm.
	HotStandby bool

	// Build is what Server.ServerStatus.BuildInfo says of scadad.
	Build BuildInfo

	// WriteTimeout bounds one gateway write (default 3 s). The library serves
	// all requests from one goroutine, so a slow write stalls every client.
	WriteTimeout time.Duration
	// PeerVerdictTTL is how long a peer's verdict about this node counts
	// (default 30 s).
	PeerVerdictTTL time.Duration
	// ElectionGrace is how long a node that was Standby or Active keeps
	// a degraded ServiceLevel (200) instead of 0 while an election goes
	// on (default 10 s): the survivor of an Active's crash must not send
	// clients away while it takes over, and a node that stays without a
	// leader longer is treated as detached.
	ElectionGrace time.Duration
	// PeerStartGrace is how long after Start a peer's verdict that it
	// cannot reach this node does not count (default 5 s): the peer probes
	// every 2 s, and what it found while this node was down is not about
	// the server just started (it held a restarted node at 200 for a
	// probe interval, and clients hopped away).
	PeerStartGrace time.Duration
	// RecheckInterval is how often the ServiceLevel is recomputed without a
	// trigger, so expiring verdicts take effect (default 1 s).
	RecheckInterval time.Duration
	// MaxNodesPerRequest caps nodes per Read/Write/Browse/monitored-item
	// request (default 1000).
	MaxNodesPerRequest int
	// HelloTimeout bounds how long a new TCP connection may take to send
	// its Hello before it is closed (default 10 s); see front.go. The
	// library gets the shorter of it and 3 s to answer a Hello before it
	// is replaced (Server.restartLibrary).
	HelloTimeout time.Duration
	// ShutdownGrace is how long Close keeps serving after publishing
	// ServiceLevel 0, so subscribed clients see it and move (default 300 ms;
	// negative disables).
	ShutdownGrace time.Duration
	// MaxWriteStringLength caps a written String value in bytes (default
	// 64 KiB): the gateway is not a place for megabyte tags.
	MaxWriteStringLength int
	// MinPublishingInterval and MaxPublishingInterval clamp subscription
	// publishing intervals (defaults 50 ms and 1 min).
	MinPublishingInterval time.Duration
	MaxPublishingInterval time.Duration
}

// SecurityProfile is one endpoint security configuration.
type SecurityProfile struct {
	// Policy is "None" or "Basic256Sha256" (any policy gopcua supports).
	Policy string
	// Mode is "None", "Sign" or "SignAndEncrypt".
	Mode string
}

// User is one user-name identity.
type User struct {
	Name     string
	Password string
	// CanWrite lets the user's writes on to the role gate; without it the
	// user reads only.
	CanWrite bool
}

// UserStore is the site's replicated OPC UA user-name identities: the
// daemon's adapter over the replicated state.
type UserStore interface {
	// User returns the identity called name, if there is one.
	User(name string) (StoredUser, bool)
}

// StoredUser is a user-name identity known by its password's hash
// (internal/passhash's PHC string).
type StoredUser struct {
	Name     string
	Hash     string
	CanWrite bool
}

// Peer is another server of the redundant set.
type Peer struct {
	ApplicationURI string
	EndpointURL    string
}

// RoleSource is what the server needs from the role stream; *role.Broadcaster
// implements it.
type RoleSource interface {
	Current() role.State
	Watch() (<-chan role.State, func())
}

// Writer forwards a permitted client write to the gateway. epoch is the
// fencing epoch of the Active role the write was allowed under.
type Writer interface {
	Write(ctx context.Context, instance, attribute string, value any, epoch role.Epoch) error
}

// Clock is the project's one clock, injected so ServiceLevel expiry is
// testable without sleeping.
type Clock = clock.Clock

func wallClock() Clock { return clock.System() }

// Deps are the server's collaborators.
type Deps struct {
	Logger zerolog.Logger
	// Registerer receives the server's metrics; nil keeps them private.
	Registerer prometheus.Registerer
	Roles      RoleSource
	Writer     Writer
	// Gate counts role-gate denials of writes as surface "write" of
	// scadad_gate_denied_total (the process-wide counter); nil counts them
	// only in scadad_opcua_write_denied_total, its alias for one release.
	Gate *activegate.Counter
	// Clock defaults to the wall clock.
	Clock Clock
	// Alarms takes the Acknowledge, Confirm and AddComment methods of
	// conditions (the daemon's alarm service); nil answers them
	// BadNotImplemented. The conditions come from SetConditions and
	// ConditionChanged.
	Alarms AlarmActions
}

func (c *Config) withDefaults() Config {
	out := *c
	if out.NamespaceURI == "" {
		out.NamespaceURI = "urn:scadad:site"
	}
	if out.SiteName == "" {
		out.SiteName = "Site"
	}
	if out.ApplicationName == "" {
		out.ApplicationName = "scadad"
	}
	if len(out.Security) == 0 {
		out.Security = []SecurityProfile{{Policy: "None", Mode: "None"}}
	}
	if out.WriteTimeout <= 0 {
		out.WriteTimeout = 3 * time.Second
	}
	if out.PeerVerdictTTL <= 0 {
		out.PeerVerdictTTL = 30 * time.Second
	}
	if out.ElectionGrace <= 0 {
		out.ElectionGrace = 10 * time.Second
	}
	if out.PeerStartGrace <= 0 {
		out.PeerStartGrace = 5 * time.Second
	}
	if out.RecheckInterval <= 0 {
		out.RecheckInterval = time.Second
	}
	if out.MaxNodesPerRequest <= 0 {
		out.MaxNodesPerRequest = 1000
	}
	if out.HelloTimeout <= 0 {
		out.HelloTimeout = defaultHelloTimeout
	}
	if out.ShutdownGrace == 0 {
		out.ShutdownGrace = 300 * time.Millisecond
	}
	if out.MaxWriteStringLength <= 0 {
		out.MaxWriteStringLength = 64 << 10
	}
	if out.MinPublishingInterval <= 0 {
		out.MinPublishingInterval = 50 * time.Millisecond
	}
	if out.MaxPublishingInterval <= 0 {
		out.MaxPublishingInterval = time.Minute
	}
	return out
}

func (c *Config) endpointURL() string { return fmt.Sprintf("opc.tcp://%s:%d", c.Host, c.Port) }

func resolveSecurity(profiles []SecurityProfile) ([]uasec.Resolved, error) {
	out := make([]uasec.Resolved, 0, len(profiles))
	for _, p := range profiles {
		r, err := uasec.Resolve(p.Policy, p.Mode)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// loadIdentity returns the certificate (DER) and key the server presents.
func loadIdentity(c *Config) ([]byte, *rsa.PrivateKey, error) {
	cert, key := c.Certificate, c.PrivateKey
	if c.CertFile != "" {
		b, err := uasec.ReadPEMOrDER(c.CertFile, "CERTIFICATE")
		if err != nil {
			return nil, nil, fmt.Errorf("read certificate: %w", err)
		}
		cert = b
	}
	if c.KeyFile != "" {
		b, err := uasec.ReadPEMOrDER(c.KeyFile, "")
		if err != nil {
			return nil, nil, fmt.Errorf("read private key: %w", err)
		}
		k, err := uasec.ParseRSAKey(b)
		if err != nil {
			return nil, nil, fmt.Errorf("parse private key %s: %w", c.KeyFile, err)
		}
		key = k
	}
	if cert == nil {
		if key == nil {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				return nil, nil, fmt.Errorf("generate server key: %w", err)
			}
			key = k
		}
		der, err := SelfSignedCertificate(c.ApplicationURI, c.Host, key)
		if err != nil {
			return nil, nil, err
		}
		return der, key, nil
	}
	if key == nil {
		return nil, nil, fmt.Errorf("certificate configured without its private key")
	}
	parsed, err := x509.ParseCertificate(cert)
	if err != nil {
		return nil, nil, fmt.Errorf("parse certificate: %w", err)
	}
	if len(parsed.URIs) == 0 {
		return nil, nil, fmt.Errorf("certificate has no URI SAN: OPC UA takes the ApplicationUri from it")
	}
	if c.ApplicationURI != "" && parsed.URIs[0].String() != c.ApplicationURI {
		return nil, nil, fmt.Errorf("certificate URI %s does not match ApplicationURI %s", parsed.URIs[0], c.ApplicationURI)
	}
	return cert, key, nil
}

// SelfSignedCertificate makes a DER certificate for appURI (as URI SAN) and
// host, signed by key. Labs and tests use it; production should configure a
// certificate its clients trust.
func SelfSignedCertificate(appURI, host string, key *rsa.PrivateKey) ([]byte, error) {
	u, err := url.Parse(appURI)
	if err != nil || appURI == "" {
		return nil, fmt.Errorf("self-signed certificate: application URI %q is not a URI", appURI)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("self-signed certificate serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "scadad OPC UA " + host, Organization: []string{"scadad"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageContentCommitment | x509.KeyUsageKeyEncipherment | x509.KeyUsageDataEncipherment | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		URIs:                  []*url.URL{u},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else if host != "" {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("self-signed certificate: %w", err)
	}
	return der, nil
}
