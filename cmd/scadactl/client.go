package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/pki"
)

// unreachableError says no node answered within the timeout.
type unreachableError struct{ msg string }

func (e unreachableError) Error() string { return e.msg }

// connect dials the first endpoint that answers a Status call within
// --timeout and returns a client bound to it.
func (g *globals) connect(ctx context.Context) (controlpb.ControlClient, func(), error) {
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
		return nil, nil, usagef("no client certificate: pass --certs DIR (with ca.crt, operator.crt, operator.key) or --cacert, --cert and --key")
	}
	tlsConf, err := pki.LoadClientTLS(ca, cert, key)
	if err != nil {
		return nil, nil, fmt.Errorf("load client certificate: %w", err)
	}
	var failures []string
	deadline, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	endpoints := strings.Split(g.endpoints, ",")
	for i, ep := range endpoints {
		ep = strings.TrimSpace(ep)
		if ep == "" {
			continue
		}
		// Give every remaining endpoint a fair share of what is left.
		left := len(endpoints) - i
		perCtx, perCancel := context.WithCancel(deadline)
		if dl, ok := deadline.Deadline(); ok {
			perCtx, perCancel = context.WithDeadline(deadline, time.Now().Add(time.Until(dl)/time.Duration(left)))
		}
		conn, err := grpc.NewClient(ep, grpc.WithTransportCredentials(credentials.NewTLS(tlsConf)))
		if err != nil {
			perCancel()
			failures = append(failures, fmt.Sprintf("%s: %v", ep, err))
			continue
		}
		client := controlpb.NewControlClient(conn)
		_, err = client.Status(perCtx, &controlpb.StatusRequest{}, grpc.WaitForReady(true))
		perCancel()
		if err != nil {
			conn.Close()
			failures = append(failures, fmt.Sprintf("%s: %v", ep, err))
			continue
		}
		return client, func() { conn.Close() }, nil
	}
	if len(failures) == 0 {
		return nil, nil, usagef("--endpoints is empty")
	}
	return nil, nil, unreachableError{fmt.Sprintf("no node reachable within %s: %s", g.timeout, strings.Join(failures, "; "))}
}

// rpcError keeps a gRPC status (for the exit code) but prints only what
// the server said, prefixed with what scadactl was doing.
type rpcError struct {
	what string
	st   *status.Status
}

func (e rpcError) Error() string {
	return fmt.Sprintf("%s: %s (%s)", e.what, e.st.Message(), e.st.Code())
}

// GRPCStatus lets status.FromError see through the wrapper.
func (e rpcError) GRPCStatus() *status.Status { return e.st }

func rpcErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return rpcError{what: what, st: status.Convert(err)}
}
