package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/grpcdial"
	"github.com/scadad/scadad/pki"
)

// unreachableError says no node answered within the timeout.
type unreachableError struct{ msg string }

func (e unreachableError) Error() string { return e.msg }

// handshakeError: a node answered, but this client and it do not trust
// each other's certificates (another site's CA, an expired certificate).
type handshakeError struct{ msg string }

func (e handshakeError) Error() string { return e.msg }

// handshakeFailure extracts the TLS reason from a call that failed in the
// handshake: this side's ("x509: certificate signed by unknown authority")
// or the node's refusal of this client's certificate ("remote error: tls:
// unknown certificate authority").
func handshakeFailure(err error) (string, bool) {
	msg := status.Convert(err).Message()
	if _, reason, ok := strings.Cut(msg, "authentication handshake failed: "); ok {
		return strings.Trim(reason, `"`), true
	}
	if i := strings.Index(msg, "remote error: tls: "); i >= 0 {
		return "the node refused this client's certificate: " + strings.Trim(msg[i:], `"`), true
	}
	return "", false
}

// connect dials the first endpoint that answers a Status call within
// --timeout and returns a client bound to it.
func (g *globals) connect(ctx context.Context) (controlpb.ControlClient, func(), error) {
	tlsConf, err := g.clientTLS()
	if err != nil {
		return nil, nil, err
	}
	deadline, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	var endpoints []string
	for _, ep := range strings.Split(g.endpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			endpoints = append(endpoints, ep)
		}
	}
	if len(endpoints) == 0 {
		return nil, nil, usagef("--endpoints is empty")
	}
	conns := make([]*grpc.ClientConn, len(endpoints))
	closeAll := func(keep int) {
		for i, c := range conns {
			if c != nil && i != keep {
				c.Close()
			}
		}
	}
	// Rounds over the endpoints in their order until one answers or the
	// timeout ends. A refused connection fails at once (not waiting for
	// it to become ready), so a node that is down costs nothing; one that
	// does not answer at all costs its share of the timeout; and a node
	// still starting is tried again in the next round.
	failures := make([]string, len(endpoints))
	for {
		handshakes := 0 // endpoints that answered but failed the TLS handshake
		for i, ep := range endpoints {
			if conns[i] == nil {
				conn, err := grpc.NewClient(ep, grpcdial.ControlAPI(tlsConf)...)
				if err != nil {
					failures[i] = fmt.Sprintf("%s: %v", ep, err)
					continue
				}
				conns[i] = conn
			}
			share := g.timeout / time.Duration(len(endpoints))
			perCtx, perCancel := context.WithTimeout(deadline, share)
			client := controlpb.NewControlClient(conns[i])
			_, err := client.Status(perCtx, &controlpb.StatusRequest{})
			perCancel()
			// PermissionDenied is an answer: the node is there and this
			// certificate may not read its status (a producer's), or may
			// do nothing (one without a role); the command's own call
			// says which, and exits 4, not 3 after the whole timeout.
			if err == nil || status.Code(err) == codes.PermissionDenied {
				closeAll(i)
				conn := conns[i]
				return client, func() { conn.Close() }, nil
			}
			if reason, ok := handshakeFailure(err); ok {
				failures[i] = fmt.Sprintf("%s: %s", ep, reason)
				handshakes++
				continue
			}
			failures[i] = fmt.Sprintf("%s: %v", ep, err)
		}
		// Every node answered and the TLS handshake failed: waiting longer
		// changes nothing, and "unreachable" would hide the reason.
		if handshakes == len(endpoints) {
			closeAll(-1)
			return nil, nil, handshakeError{fmt.Sprintf("the nodes answer but the TLS handshake fails (are --certs, or --cacert, --cert and --key, this site's?): %s", strings.Join(failures, "; "))}
		}
		select {
		case <-deadline.Done():
			closeAll(-1)
			return nil, nil, unreachableError{fmt.Sprintf("no node reachable within %s: %s", g.timeout, strings.Join(failures, "; "))}
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// clientTLS loads the operator's client certificate and the site CA.
func (g *globals) clientTLS() (*tls.Config, error) {
	ca, cert, key := g.caFile, g.certFile, g.keyFile
	if g.certsDir != "" {
		if ca == "" {
			ca = filepath.Join(g.certsDir, "ca.crt")
		}
		if cert == "" {
			cert = filepath.Join(g.certsDir, "operator.crt")
		}
		if key == "" {
			key = filepath.Join(g.certsDir, "operator.key")
		}
	}
	if ca == "" || cert == "" || key == "" {
		return nil, usagef("no client certificate: pass --certs DIR (with ca.crt, operator.crt, operator.key) or --cacert, --cert and --key")
	}
	tlsConf, err := pki.LoadClientTLS(ca, cert, key)
	if err != nil {
		return nil, fmt.Errorf("load client certificate: %w", err)
	}
	return tlsConf, nil
}

// leaderStatus asks the node at addr (the leader's control API) for its
// status, within --timeout.
func (g *globals) leaderStatus(ctx context.Context, addr string) (*controlpb.StatusResponse, error) {
	tlsConf, err := g.clientTLS()
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(addr, grpcdial.ControlAPI(tlsConf)...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	return controlpb.NewControlClient(conn).Status(ctx, &controlpb.StatusRequest{})
}

// rpcError keeps a gRPC status (for the exit code) but prints only what
// the server said, prefixed with what scadactl was doing.
type rpcError struct {
	what string
	st   *status.Status
}

func (e rpcError) Error() string {
	msg := e.st.Message()
	// The server often names the operation itself ("deploy rollback: …").
	if strings.HasPrefix(msg, e.what+": ") {
		return fmt.Sprintf("%s (%s)", msg, e.st.Code())
	}
	return fmt.Sprintf("%s: %s (%s)", e.what, msg, e.st.Code())
}

// GRPCStatus lets status.FromError see through the wrapper.
func (e rpcError) GRPCStatus() *status.Status { return e.st }

func rpcErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return rpcError{what: what, st: status.Convert(err)}
}
