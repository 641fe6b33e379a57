package control

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/pki"
)

// peerContext is what grpc hands a handler for a TLS peer presenting cert.
func peerContext(cert *x509.Certificate) context.Context {
	st := tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}, VerifiedChains: [][]*x509.Certificate{{cert}}}
	return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{}, AuthInfo: credentials.TLSInfo{State: st}})
}

// forwarded is ctx as the leader sees a call node forwarded for orig.
func forwarded(node, orig *x509.Certificate) context.Context {
	md := metadata.Pairs(forwardedKey, "1", onBehalfKey, orig.Subject.CommonName, onBehalfCertKey, string(orig.Raw))
	return metadata.NewIncomingContext(peerContext(node), md)
}

// TestAuthorizerChecksTheOriginalCaller: the leader decides a forwarded
// call from the certificate of whoever called the follower, verified
// against the site CA, not from the follower's node certificate; a client
// certificate carrying a node's name is not that node; every RPC of the
// services has an access rule.
func TestAuthorizerChecksTheOriginalCaller(t *testing.T) {
	site, err := pki.GenerateSite("s", []string{"node-a", "node-b"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(name string, role pki.Role) *x509.Certificate {
		l, err := site.CA.IssueClientRole(name, role, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return l.Cert
	}
	viewer, operator, admin := leaf("watcher", pki.RoleViewer), leaf("shiftlead", pki.RoleOperator), leaf("boss", pki.RoleAdmin)
	producer, legacy, fakeNode := leaf("feed", pki.RoleProducer), leaf("old", pki.RoleNone), leaf("node-a", pki.RoleViewer)
	node := site.Nodes["node-b"].Cert
	strangerLeaf, err := site.CA.IssueNode("node-z", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	stranger := strangerLeaf.Cert
	foreign, err := pki.GenerateSite("other", nil, []string{"boss"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	a := &Authorizer{Configured: []Member{{ID: "node-a"}, {ID: "node-b"}}, Roots: site.CA.Pool()}

	failover := controlpb.Control_Failover_FullMethodName
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		method string
		want   codes.Code
		author string
	}{
		{"viewer reads", peerContext(viewer), controlpb.Control_Status_FullMethodName, codes.OK, "watcher"},
		{"viewer fails over", peerContext(viewer), failover, codes.PermissionDenied, ""},
		{"operator fails over", peerContext(operator), failover, codes.OK, "shiftlead"},
		{"operator restores", peerContext(operator), controlpb.Control_SnapshotRestore_FullMethodName, codes.PermissionDenied, ""},
		{"admin restores", peerContext(admin), controlpb.Control_SnapshotRestore_FullMethodName, codes.OK, "boss"},
		{"admin sends raw commands", peerContext(admin), controlpb.Control_Apply_FullMethodName, codes.PermissionDenied, ""},
		{"producer enqueues", peerContext(producer), controlpb.Control_SFEnqueue_FullMethodName, codes.OK, "feed"},
		{"producer reads", peerContext(producer), controlpb.Control_SFList_FullMethodName, codes.PermissionDenied, ""},
		{"a certificate without a role reads nothing", peerContext(legacy), controlpb.Control_Status_FullMethodName, codes.PermissionDenied, ""},
		{"a certificate without a role is no admin", peerContext(legacy), controlpb.Control_AddMember_FullMethodName, codes.PermissionDenied, ""},
		{"forwarded certificate without a role", forwarded(node, legacy), controlpb.Control_Status_FullMethodName, codes.PermissionDenied, ""},
		{"node certificate of no configured member", peerContext(stranger), controlpb.Control_Status_FullMethodName, codes.PermissionDenied, ""},
		{"node on its own account", peerContext(node), controlpb.Control_Apply_FullMethodName, codes.OK, "node-b"},
		{"client named like a node", peerContext(fakeNode), controlpb.Control_Apply_FullMethodName, codes.PermissionDenied, ""},
		{"forwarded viewer", forwarded(node, viewer), failover, codes.PermissionDenied, ""},
		{"forwarded operator", forwarded(node, operator), failover, codes.OK, "shiftlead via node-b"},
		{"forwarded foreign certificate", forwarded(node, foreign.Clients["boss"].Cert), failover, codes.PermissionDenied, ""},
		{"forwarded by a non-node", forwarded(viewer, admin), failover, codes.PermissionDenied, ""},
		{"no certificate", context.Background(), controlpb.Control_Status_FullMethodName, codes.Unauthenticated, ""},
		{"unknown method", peerContext(admin), "/scadad.control.v1.Control/Future", codes.PermissionDenied, ""},
	} {
		var got string
		_, err := a.Unary(tc.ctx, nil, &grpc.UnaryServerInfo{FullMethod: tc.method}, func(ctx context.Context, _ any) (any, error) {
			got = (&Server{}).author(ctx)
			return nil, nil
		})
		if status.Code(err) != tc.want {
			t.Errorf("%s: %v; want %s", tc.name, err, tc.want)
		}
		if err == nil && got != tc.author {
			t.Errorf("%s: author %q, want %q", tc.name, got, tc.author)
		}
	}

	for _, sd := range []grpc.ServiceDesc{controlpb.Control_ServiceDesc, controlpb.Heal_ServiceDesc} {
		var names []string
		for _, m := range sd.Methods {
			names = append(names, m.MethodName)
		}
		for _, s := range sd.Streams {
			names = append(names, s.StreamName)
		}
		for _, n := range names {
			if _, ok := methodNeed("/" + sd.ServiceName + "/" + n); !ok {
				t.Errorf("%s/%s has no access rule", sd.ServiceName, n)
			}
		}
	}
}

// TestAuthorizerRefusesACertificateWithoutARole: v0.1.0 let a client
// certificate issued before roles act as admin, for that release only.
// Now it is refused, directly and forwarded, with what is wrong and the
// fix; a member's node certificate still calls on its own account.
func TestAuthorizerRefusesACertificateWithoutARole(t *testing.T) {
	site, err := pki.GenerateSite("s", []string{"node-a", "node-b"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	old, err := site.CA.IssueClientRole("old-operator", pki.RoleNone, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	a := &Authorizer{Configured: []Member{{ID: "node-a"}, {ID: "node-b"}}, Roots: site.CA.Pool()}
	node := site.Nodes["node-b"].Cert
	call := func(ctx context.Context, method string) error {
		_, err := a.Unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return nil, nil })
		return err
	}
	for name, ctx := range map[string]context.Context{"direct": peerContext(old.Cert), "forwarded": forwarded(node, old.Cert)} {
		err := call(ctx, controlpb.Control_Status_FullMethodName)
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("%s: %v; want PermissionDenied", name, err)
		}
		for _, want := range []string{`"old-operator"`, pki.SerialHex(old.Cert), "carries no role", "scadactl certs issue --client --role viewer|operator|admin", "scadactl certs revoke"} {
			if !strings.Contains(status.Convert(err).Message(), want) {
				t.Errorf("%s: %q does not say %q", name, status.Convert(err).Message(), want)
			}
		}
	}
	for _, m := range []string{controlpb.Control_Apply_FullMethodName, controlpb.Heal_HealInfo_FullMethodName, controlpb.Control_Status_FullMethodName} {
		if err := call(peerContext(node), m); err != nil {
			t.Errorf("node-b's own certificate calling %s: %v; want it let through", m, err)
		}
	}
}
