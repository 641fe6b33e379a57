package control

import (
	"context"
	"crypto/x509"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/passhash"
)

// OPCUATrustAdd trusts an OPC UA client certificate (or CA) on every
// node's OPC UA server: the file's bytes, or a certificate a node
// rejected, by its thumbprint.
func (s *Server) OPCUATrustAdd(ctx context.Context, req *controlpb.OPCUATrustAddRequest) (*controlpb.OPCUATrustAddResponse, error) {
	der := req.Der
	if len(der) == 0 {
		if req.RejectedThumbprint == "" {
			return nil, status.Error(codes.InvalidArgument, "opcua trust add: give a certificate file or --rejected THUMBPRINT")
		}
		thumb := normalThumbprint(req.RejectedThumbprint)
		r, ok := s.State.Access().OPCUARejected[thumb]
		if !ok {
			return nil, status.Errorf(codes.NotFound, "opcua trust add: no rejected certificate with thumbprint %s (scadactl opcua trust rejected lists them)", thumb)
		}
		der = r.DER
	}
	if len(der) > fsm.MaxCertificateBytes {
		return nil, status.Errorf(codes.InvalidArgument, "opcua trust add: %d bytes is not a certificate (at most %d)", len(der), fsm.MaxCertificateBytes)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "opcua trust add: not an X.509 certificate in DER: %v", err)
	}
	res, err := s.Forward.Propose(ctx, &fsmpb.Command{
		Version: fsm.CommandVersion, StampUnixNano: s.now().UnixNano(), Actor: s.author(ctx),
		Body: &fsmpb.Command_OpcuaTrustAdd{OpcuaTrustAdd: &fsmpb.OPCUATrustAdd{Der: der, Name: req.Name}},
	})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "opcua trust add: %v", res.Err)
	}
	return &controlpb.OPCUATrustAddResponse{Thumbprint: fsm.Thumbprint(der), Subject: cert.Subject.String()}, nil
}

// normalThumbprint accepts a thumbprint as tools print it: either case,
// with colons or spaces.
func normalThumbprint(s string) string {
	return strings.ToUpper(strings.NewReplacer(":", "", " ", "").Replace(strings.TrimSpace(s)))
}

// certFacts are what a listing says of a certificate beyond its bytes; a
// certificate that no longer parses (a newer Go) is listed by thumbprint.
func certFacts(der []byte) (subject, uri string, isCA bool, notAfter int64) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return "(unreadable: " + err.Error() + ")", "", false, 0
	}
	if len(cert.URIs) > 0 {
		uri = cert.URIs[0].String()
	}
	return cert.Subject.String(), uri, cert.IsCA, cert.NotAfter.Unix()
}

// OPCUATrustList lists the trusted certificates from this node's replica.
func (s *Server) OPCUATrustList(ctx context.Context, _ *controlpb.OPCUATrustListRequest) (*controlpb.OPCUATrustListResponse, error) {
	resp := &controlpb.OPCUATrustListResponse{}
	for _, c := range s.State.Access().OPCUATrustedList() {
		subject, uri, isCA, notAfter := certFacts(c.DER)
		resp.Trusted = append(resp.Trusted, &controlpb.OPCUACertificate{Thumbprint: c.Thumbprint, Name: c.Name, Subject: subject, ApplicationUri: uri,
			IsCa: isCA, NotAfterUnix: notAfter, Actor: c.Actor, AddedUnix: c.At.Unix(), Der: c.DER})
	}
	return resp, nil
}

// OPCUATrustRemove takes a certificate off the trusted and rejected lists:
// its next secure channel is refused on every node.
func (s *Server) OPCUATrustRemove(ctx context.Context, req *controlpb.OPCUATrustRemoveRequest) (*controlpb.OPCUATrustRemoveResponse, error) {
	res, err := s.Forward.Propose(ctx, &fsmpb.Command{
		Version: fsm.CommandVersion, StampUnixNano: s.now().UnixNano(), Actor: s.author(ctx),
		Body: &fsmpb.Command_OpcuaTrustRemove{OpcuaTrustRemove: &fsmpb.OPCUATrustRemove{Thumbprint: normalThumbprint(req.Thumbprint)}},
	})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		if errors.Is(res.Err, fsm.ErrUnknown) {
			return nil, status.Errorf(codes.NotFound, "opcua trust remove: %v", res.Err)
		}
		return nil, status.Errorf(codes.InvalidArgument, "opcua trust remove: %v", res.Err)
	}
	return &controlpb.OPCUATrustRemoveResponse{}, nil
}

// OPCUATrustRejected lists the certificates any node's OPC UA server
// refused (every node records its refusals in the replicated state).
func (s *Server) OPCUATrustRejected(ctx context.Context, _ *controlpb.OPCUATrustRejectedRequest) (*controlpb.OPCUATrustRejectedResponse, error) {
	resp := &controlpb.OPCUATrustRejectedResponse{}
	for _, r := range s.State.Access().OPCUARejectedList() {
		resp.Rejected = append(resp.Rejected, &controlpb.OPCUARejectedCertificate{Thumbprint: r.Thumbprint, Subject: r.Subject, ApplicationUri: r.ApplicationURI,
			Node: r.NodeID, Nodes: r.Nodes, FirstUnixNano: r.First.UnixNano(), LastUnixNano: r.Last.UnixNano(), Count: r.Count, Reason: r.Reason, Der: r.DER})
	}
	return resp, nil
}

// OPCUAUserSet makes or replaces an OPC UA user from its password's hash
// (scadactl hashes; the password never reaches a node).
func (s *Server) OPCUAUserSet(ctx context.Context, req *controlpb.OPCUAUserSetRequest) (*controlpb.OPCUAUserSetResponse, error) {
	if req.Name == "" {
		return nil, status.Error(codes.InvalidArgument, "opcua users set: a user name is required")
	}
	if err := passhash.Check(req.Hash); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "opcua users set %s: %v", req.Name, err)
	}
	res, err := s.Forward.Propose(ctx, &fsmpb.Command{
		Version: fsm.CommandVersion, StampUnixNano: s.now().UnixNano(), Actor: s.author(ctx),
		Body: &fsmpb.Command_OpcuaUserSet{OpcuaUserSet: &fsmpb.OPCUAUserSet{Name: req.Name, Hash: req.Hash, CanWrite: req.CanWrite}},
	})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "opcua users set: %v", res.Err)
	}
	return &controlpb.OPCUAUserSetResponse{}, nil
}

// OPCUAUserList lists the users (never their hashes) from this node's
// replica.
func (s *Server) OPCUAUserList(ctx context.Context, _ *controlpb.OPCUAUserListRequest) (*controlpb.OPCUAUserListResponse, error) {
	resp := &controlpb.OPCUAUserListResponse{}
	for _, u := range s.State.Access().OPCUAUserList() {
		resp.Users = append(resp.Users, &controlpb.OPCUAUser{Name: u.Name, CanWrite: u.CanWrite, Actor: u.Actor, SetUnix: u.At.Unix()})
	}
	return resp, nil
}

// OPCUAUserRemove deletes an OPC UA user: its next ActivateSession is
// refused on every node.
func (s *Server) OPCUAUserRemove(ctx context.Context, req *controlpb.OPCUAUserRemoveRequest) (*controlpb.OPCUAUserRemoveResponse, error) {
	res, err := s.Forward.Propose(ctx, &fsmpb.Command{
		Version: fsm.CommandVersion, StampUnixNano: s.now().UnixNano(), Actor: s.author(ctx),
		Body: &fsmpb.Command_OpcuaUserRemove{OpcuaUserRemove: &fsmpb.OPCUAUserRemove{Name: req.Name}},
	})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		if errors.Is(res.Err, fsm.ErrUnknown) {
			return nil, status.Errorf(codes.NotFound, "opcua users remove: %v", res.Err)
		}
		return nil, status.Errorf(codes.InvalidArgument, "opcua users remove: %v", res.Err)
	}
	return &controlpb.OPCUAUserRemoveResponse{}, nil
}
