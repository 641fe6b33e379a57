package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/pki"
)

// A node of another site (its certificate from another CA) is not "no node
// reachable": the TLS reason is the answer, so the operator sees they hold
// the wrong site's certificates.
func TestWrongSiteCASaysSo(t *testing.T) {
	dir := t.TempDir()
	node, operator := filepath.Join(dir, "site-a"), filepath.Join(dir, "site-b")
	if err := pki.Init(node, "site-a", []string{"n"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := pki.Init(operator, "site-b", []string{"n"}, []string{"operator"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	conf, err := pki.LoadServerTLS(filepath.Join(node, "ca.crt"), filepath.Join(node, "n.crt"), filepath.Join(node, "n.key"))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(conf)))
	controlpb.RegisterControlServer(srv, controlpb.UnimplementedControlServer{})
	go srv.Serve(lis)
	defer srv.Stop()

	var out, errs strings.Builder
	code := run(t.Context(), []string{"--endpoints", lis.Addr().String(), "--certs", operator, "--timeout", "1s", "status"}, strings.NewReader(""), &out, &errs)
	if code == 0 || !strings.Contains(errs.String(), "certificate signed by unknown authority") || strings.Contains(errs.String(), "no node reachable") {
		t.Fatalf("status against another site's node: exit %d, %q; want the TLS reason, not no node reachable", code, errs.String())
	}
}
