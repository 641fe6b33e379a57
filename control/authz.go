package control

import (
	"context"
	"crypto/x509"
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

// onBehalfCertKey carries, on a call a follower forwards, the DER of the
// certificate of whoever called the follower. The leader verifies it
// against the site CA and decides from its role: a follower is trusted to
// pass the call on, not to vouch for what the caller may do.
const onBehalfCertKey = "x-scadad-on-behalf-cert-bin"

// need is what a control RPC requires of its caller.
type need int

const (
	needViewer   need = iota // reads
	needProducer             // enqueues
	needOperator             // day-to-day writes
	needAdmin                // membership, overrides, restores
	needNode                 // between the cluster's own nodes only
)

func (n need) String() string {
	switch n {
	case needViewer:
		return "viewer"
	case needProducer:
		return "producer"
	case needOperator:
		return "operator"
	case needAdmin:
		return "admin"
	}
	return "a cluster node's certificate"
}

// methodNeed is the access rule of every control and heal RPC. A method
// without a rule is refused: a new RPC is closed until someone decides
// who may call it.
func methodNeed(method string) (need, bool) {
	switch method {
	case controlpb.Control_Status_FullMethodName,
		controlpb.Control_Members_FullMethodName,
		controlpb.Control_Audit_FullMethodName,
		controlpb.Control_DeployHistory_FullMethodName,
		controlpb.Control_DeployStatus_FullMethodName,
		controlpb.Control_DeployGet_FullMethodName,
		controlpb.Control_SFStats_FullMethodName,
		controlpb.Control_SFList_FullMethodName,
		controlpb.Control_CertRevoked_FullMethodName,
		controlpb.Control_TokenList_FullMethodName,
		controlpb.Control_Check_FullMethodName,
		controlpb.Control_AlarmList_FullMethodName,
		controlpb.Control_OPCUATrustList_FullMethodName,
		controlpb.Control_OPCUATrustRejected_FullMethodName,
		controlpb.Control_OPCUAUserList_FullMethodName:
		return needViewer, true
	case controlpb.Control_SFEnqueue_FullMethodName,
		controlpb.Control_SFEnqueueStream_FullMethodName:
		return needProducer, true
	case controlpb.Control_Failover_FullMethodName,
		controlpb.Control_DeployPush_FullMethodName,
		controlpb.Control_DeployRollback_FullMethodName,
		controlpb.Control_SFRetry_FullMethodName,
		controlpb.Control_SFDiscard_FullMethodName,
		controlpb.Control_AlarmAck_FullMethodName,
		controlpb.Control_AlarmShelve_FullMethodName,
		// A backup holds every message and the whole site config.
		controlpb.Control_SnapshotSave_FullMethodName:
		return needOperator, true
	case controlpb.Control_AddMember_FullMethodName,
		controlpb.Control_RemoveMember_FullMethodName,
		controlpb.Control_Override_FullMethodName,
		controlpb.Control_SnapshotRestore_FullMethodName,
		controlpb.Control_CertRevoke_FullMethodName,
		controlpb.Control_TokenCreate_FullMethodName,
		controlpb.Control_TokenRevoke_FullMethodName,
		controlpb.Control_OPCUATrustAdd_FullMethodName,
		controlpb.Control_OPCUATrustRemove_FullMethodName,
		controlpb.Control_OPCUAUserSet_FullMethodName,
		controlpb.Control_OPCUAUserRemove_FullMethodName:
		return needAdmin, true
	case controlpb.Control_Apply_FullMethodName,
		controlpb.Heal_HealInfo_FullMethodName,
		controlpb.Heal_HealBegin_FullMethodName,
		controlpb.Heal_HealMissing_FullMethodName,
		controlpb.Heal_HealMessages_FullMethodName,
		controlpb.Heal_HealFinished_FullMethodName,
		controlpb.Heal_HealRecords_FullMethodName,
		controlpb.Heal_HealFinish_FullMethodName:
		return needNode, true
	}
	return needNode, false
}

// allows says whether role may call what needs n.
func allows(r pki.Role, n need) bool {
	switch r {
	case pki.RoleAdmin:
		return n <= needAdmin
	case pki.RoleOperator:
		return n <= needOperator
	case pki.RoleViewer:
		return n == needViewer
	case pki.RoleProducer:
		return n == needProducer
	}
	return false
}

// Caller is who a control RPC is for, as the Authorizer established it.
type Caller struct {
	// Name is the certificate's common name.
	Name string
	// Role is what the certificate lets its holder do.
	Role pki.Role
	// Node is set for a configured member's node certificate calling on
	// its own account.
	Node bool
	// Via is the member that forwarded the call, if one did.
	Via string
	// Serial is the certificate's serial number (pki.SerialHex).
	Serial string
	// Cert is the caller's verified certificate.
	Cert *x509.Certificate
}

// String names the caller for the audit log: "alice", or "alice via
// node-b" for a call a follower forwarded.
func (c Caller) String() string {
	if c.Via != "" {
		return c.Name + " via " + c.Via
	}
	return c.Name
}

type callerKey struct{}

// WithCaller puts c on ctx for an in-process call of a Server method whose
// caller was authenticated another way (the status page, which calls its
// node's server directly): the audit trail then names c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller the Authorizer put on ctx.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// Authorizer checks every control and heal RPC against its access rule
// before the handler runs, on every node: the caller's certificate role,
// or, for a call a member forwarded, the role of the certificate that
// called the member.
type Authorizer struct {
	Configured []Member
	// Roots is the site CA, to verify a forwarded caller's certificate.
	Roots *x509.CertPool
	// Revoked is the replicated deny list (nil: none). The handshake
	// checks it too; this catches a call on a connection opened just
	// before the revocation and a forwarded caller's certificate.
	Revoked pki.Revoked
	Now     func() time.Time
}

// Unary is the unary server interceptor.
func (a *Authorizer) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := a.authorize(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// Stream is the stream server interceptor.
func (a *Authorizer) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := a.authorize(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, callerStream{ServerStream: ss, ctx: ctx})
}

type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s callerStream) Context() context.Context { return s.ctx }

func (a *Authorizer) authorize(ctx context.Context, method string) (context.Context, error) {
	n, known := methodNeed(method)
	if !known {
		return nil, status.Errorf(codes.PermissionDenied, "%s: no access rule for this method; refused", method)
	}
	c, err := a.caller(ctx)
	if err != nil {
		return nil, err
	}
	short := shortMethod(method)
	switch {
	case c.Node:
	case n == needNode:
		return nil, status.Errorf(codes.PermissionDenied, "%s: %q is not a cluster node; this method is for the cluster's own nodes", short, c.Name)
	case !allows(c.Role, n):
		return nil, status.Errorf(codes.PermissionDenied, "%s: certificate %q (serial %s) has role %s and this needs %s; issue one with scadactl certs issue --client --role %s",
			short, c.Name, c.Serial, c.Role, n, n)
	}
	return context.WithValue(ctx, callerKey{}, c), nil
}

func shortMethod(full string) string {
	for i := len(full) - 1; i >= 0; i-- {
		if full[i] == '/' {
			return full[i+1:]
		}
	}
	return full
}

// caller reads who is calling from the verified TLS peer, and, when a
// member forwards, from the certificate it forwards.
func (a *Authorizer) caller(ctx context.Context) (Caller, error) {
	cert := peerCert(ctx)
	if cert == nil {
		return Caller{}, status.Error(codes.Unauthenticated, "no verified client certificate on this connection")
	}
	direct, err := a.identify(cert)
	if err != nil {
		return Caller{}, err
	}
	if !direct.Node {
		return direct, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	behalf := md.Get(onBehalfCertKey)
	if len(behalf) == 0 {
		return direct, nil
	}
	orig, err := x509.ParseCertificate([]byte(behalf[0]))
	if err != nil {
		return Caller{}, status.Errorf(codes.PermissionDenied, "forwarded by %s: the original caller's certificate does not parse: %v", direct.Name, err)
	}
	if _, err := orig.Verify(x509.VerifyOptions{Roots: a.Roots, CurrentTime: a.now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return Caller{}, status.Errorf(codes.PermissionDenied, "forwarded by %s: the original caller's certificate %q does not verify against the site CA: %v", direct.Name, orig.Subject.CommonName, err)
	}
	c, err := a.identify(orig)
	if err != nil {
		return Caller{}, err
	}
	c.Via = direct.Name
	return c, nil
}

func (a *Authorizer) now() time.Time {
	if a.Now == nil {
		return time.Now()
	}
	return a.Now()
}

// identify reads a verified certificate's identity: a member's node
// certificate is that node; anything else is a client with a role.
func (a *Authorizer) identify(cert *x509.Certificate) (Caller, error) {
	c := Caller{Name: cert.Subject.CommonName, Serial: pki.SerialHex(cert), Cert: cert}
	if a.Revoked != nil && a.Revoked(c.Serial) {
		return Caller{}, status.Errorf(codes.Unauthenticated, "certificate %q (serial %s) is revoked", c.Name, c.Serial)
	}
	if _, member := memberNamed(a.Configured, c.Name); member && pki.IsNodeCert(cert) {
		c.Node = true
		return c, nil
	}
	if pki.IsNodeCert(cert) {
		return Caller{}, status.Errorf(codes.PermissionDenied, "certificate %q (serial %s) is a node's certificate, and no member of this node's cluster.members is named %q: a node calls only as a configured member; an operator calls with a client certificate (scadactl certs issue --client --role viewer|operator|admin)",
			c.Name, c.Serial, c.Name)
	}
	r, err := pki.ClientRole(cert)
	if err != nil {
		return Caller{}, status.Errorf(codes.PermissionDenied, "%v", err)
	}
	c.Role = r
	return c, nil
}

// peerCert returns the verified leaf certificate of ctx's TLS peer.
func peerCert(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.PeerCertificates) == 0 {
		return nil
	}
	return ti.State.PeerCertificates[0]
}

// onBehalfContext adds what the leader needs to check the original caller
// of a forwarded call: its certificate (and its name, for a leader of the
// previous release that reads only that).
func onBehalfContext(ctx, out context.Context) context.Context {
	c, ok := CallerFrom(ctx)
	if !ok || c.Cert == nil {
		return metadata.AppendToOutgoingContext(out, onBehalfKey, actor(ctx))
	}
	return metadata.AppendToOutgoingContext(out, onBehalfKey, c.Name, onBehalfCertKey, string(c.Cert.Raw))
}
