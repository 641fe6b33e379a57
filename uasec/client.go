package uasec

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"
)

// ClientOptions configure an OPC UA client connection: the OPC UA server's
// peer probe, Pick and Watch, and the upstream sessions (uaclient).
// The zero value connects with security None as the anonymous user.
type ClientOptions struct {
	// SecurityPolicy ("None", "Basic256Sha256") and SecurityMode ("None",
	// "Sign", "SignAndEncrypt"); empty means None.
	SecurityPolicy string
	SecurityMode   string
	// Certificate (DER) and PrivateKey identify the client on secure channels.
	Certificate []byte
	PrivateKey  *rsa.PrivateKey
	// ServerCertificates are the server certificates, or the CA
	// certificates that issued them, a secure channel may be opened to;
	// empty accepts whatever certificate the server presents (gopcua's
	// client checks none).
	ServerCertificates []*x509.Certificate
	// Username and Password select a user-name identity; empty is anonymous.
	Username string
	Password string
	// Timeout bounds one connect-and-read (default 2 s).
	Timeout time.Duration
}

// EffectiveTimeout is the options' bound on one connect-and-read: Timeout, or 2 s.
func (o ClientOptions) EffectiveTimeout() time.Duration {
	if o.Timeout <= 0 {
		return 2 * time.Second
	}
	return o.Timeout
}

// Close ends c's session and closes its connection within the options'
// timeout. gopcua's Close sends CloseSession and then reports Closed on the
// client's state channel, waiting on its context for room there; with a
// context that never ends, a channel nobody drains any more would hold the
// caller (and the reconnect loop behind it) for good.
func (o ClientOptions) Close(c *gopcua.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), o.EffectiveTimeout())
	defer cancel()
	_ = c.Close(ctx) // the connection is gone either way; there is nothing to do about an error
}

// security resolves the options' policy and mode (empty: None) and the
// identity token type they log in with.
func (o ClientOptions) security() (Resolved, ua.UserTokenType, error) {
	policy, mode := o.SecurityPolicy, o.SecurityMode
	if policy == "" {
		policy = "None"
	}
	if mode == "" {
		mode = "None"
	}
	sec, err := Resolve(policy, mode)
	if err != nil {
		return Resolved{}, 0, err
	}
	if o.Username != "" {
		return sec, ua.UserTokenTypeUserName, nil
	}
	return sec, ua.UserTokenTypeAnonymous, nil
}

// CanOpenSession says whether one of eps offers the options' security
// and identity: the options' policy and mode, and a user-token policy for
// their identity. A certificate the server does not trust still fails.
func (o ClientOptions) CanOpenSession(eps []*ua.EndpointDescription) bool {
	sec, want, err := o.security()
	if err != nil {
		return false
	}
	for _, ep := range eps {
		if ep.SecurityPolicyURI != sec.PolicyURI || ep.SecurityMode != sec.Mode {
			continue
		}
		for _, t := range ep.UserIdentityTokens {
			if t.TokenType == want {
				return true
			}
		}
	}
	return false
}

// checkServer refuses a server certificate the options do not trust; any
// is accepted when they name none.
func (o ClientOptions) checkServer(der []byte) error {
	if len(o.ServerCertificates) == 0 {
		return nil
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("the server's certificate is not a valid X.509 certificate: %w", err)
	}
	if !TrustedBy(cert, o.ServerCertificates, time.Now()) {
		return fmt.Errorf("the server's certificate %s is not the one configured, nor issued by it", DescribeCert(cert))
	}
	return nil
}

// dial connects a client to endpoint. Secure channels need the server's
// certificate and the user-token policy, so those first ask GetEndpoints.
func (o ClientOptions) dial(ctx context.Context, endpoint string, extra ...gopcua.Option) (*gopcua.Client, error) {
	sec, tokenType, err := o.security()
	if err != nil {
		return nil, fmt.Errorf("client security: %w", err)
	}
	opts := []gopcua.Option{
		gopcua.AutoReconnect(false),
		gopcua.RequestTimeout(o.EffectiveTimeout()),
		gopcua.DialTimeout(o.EffectiveTimeout()),
		gopcua.SessionTimeout(time.Minute),
	}
	if sec.Mode == ua.MessageSecurityModeNone && tokenType == ua.UserTokenTypeAnonymous {
		opts = append(opts, gopcua.SecurityMode(ua.MessageSecurityModeNone), gopcua.AuthAnonymous())
	} else {
		eps, err := gopcua.GetEndpoints(ctx, endpoint, gopcua.DialTimeout(o.EffectiveTimeout()))
		if err != nil {
			return nil, fmt.Errorf("get endpoints of %s: %w", endpoint, err)
		}
		ep, err := gopcua.SelectEndpoint(eps, sec.PolicyURI, sec.Mode)
		if err != nil {
			return nil, fmt.Errorf("select endpoint of %s: %w", endpoint, err)
		}
		if err := o.checkServer(ep.ServerCertificate); err != nil {
			return nil, fmt.Errorf("connect %s: %w", endpoint, err)
		}
		ep.EndpointURL = endpoint // the advertised host may differ from the one we reached
		opts = append(opts, gopcua.SecurityFromEndpoint(ep, tokenType))
		if o.Certificate != nil {
			opts = append(opts, gopcua.Certificate(o.Certificate))
		}
		if o.PrivateKey != nil {
			opts = append(opts, gopcua.PrivateKey(o.PrivateKey))
		}
		if tokenType == ua.UserTokenTypeUserName {
			opts = append(opts, gopcua.AuthUsername(o.Username, o.Password))
		} else {
			opts = append(opts, gopcua.AuthAnonymous())
		}
	}
	c, err := gopcua.NewClient(endpoint, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", endpoint, err)
	}
	if err := c.Connect(ctx); err != nil {
		o.Close(c)
		return nil, fmt.Errorf("connect %s: %w%s", endpoint, err, o.hint(ctx, endpoint, sec, err))
	}
	return c, nil
}

// hint says what an operator can do about a refused connection: a server
// that offers no endpoint for these options, or (gopcua's client reports
// a server's Error message during the handshake as EOF) a server that
// does not trust this client's certificate.
func (o ClientOptions) hint(ctx context.Context, endpoint string, sec Resolved, err error) string {
	if !errors.Is(err, io.EOF) && !errors.Is(err, ua.StatusBadSecurityModeRejected) {
		return ""
	}
	eps, gerr := gopcua.GetEndpoints(ctx, endpoint, gopcua.DialTimeout(o.EffectiveTimeout()))
	if gerr != nil {
		return ""
	}
	if !o.CanOpenSession(eps) {
		var offered []string
		for _, ep := range eps {
			offered = append(offered, Resolved{PolicyURI: ep.SecurityPolicyURI, Mode: ep.SecurityMode}.String())
		}
		return fmt.Sprintf(" (the server offers %s, not %s with this identity: give a security policy and mode it offers, a client certificate and, if it wants one, a user)",
			strings.Join(slices.Compact(slices.Sorted(slices.Values(offered))), ", "), sec)
	}
	if sec.Mode != ua.MessageSecurityModeNone && errors.Is(err, io.EOF) {
		return " (the server closed the connection during the handshake: it may not trust this client's certificate; a scadad node keeps refused ones in <data_dir>/opcua/pki/rejected)"
	}
	return ""
}

// Cancel deletes a subscription on its server within the options' timeout,
// rather than leaving it there with its monitored items until its lifetime
// runs out (on servers other than scadad's, possibly never).
func (o ClientOptions) Cancel(sub *gopcua.Subscription) {
	ctx, cancel := context.WithTimeout(context.Background(), o.EffectiveTimeout())
	defer cancel()
	_ = sub.Cancel(ctx) // the session is ending either way
}

// Dial connects a client to endpoint with the options' security and
// identity; extra options (a state channel, say) are added last. The
// client does not reconnect by itself: its owner decides when to retry.
func Dial(ctx context.Context, endpoint string, o ClientOptions, extra ...gopcua.Option) (*gopcua.Client, error) {
	return o.dial(ctx, endpoint, extra...)
}

// ReadPasswordFile reads a user's password kept in a file (so no password
// travels in a site config or on a command line), without the line break
// an editor leaves at its end.
func ReadPasswordFile(path string) (string, error) {
	pw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("password file: %w", err)
	}
	return strings.TrimRight(string(pw), "\r\n"), nil
}

// LoadClientIdentity reads a client application certificate and its RSA
// private key (PEM or DER files) for ClientOptions.
func LoadClientIdentity(certFile, keyFile string) ([]byte, *rsa.PrivateKey, error) {
	cert, err := ReadPEMOrDER(certFile, "CERTIFICATE")
	if err != nil {
		return nil, nil, fmt.Errorf("read client certificate: %w", err)
	}
	der, err := ReadPEMOrDER(keyFile, "")
	if err != nil {
		return nil, nil, fmt.Errorf("read client private key: %w", err)
	}
	key, err := ParseRSAKey(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parse client private key %s: %w", keyFile, err)
	}
	return cert, key, nil
}
