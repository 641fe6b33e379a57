package control

import (
	"context"
	"net"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/pki"
)

// CertRevoke puts a certificate on the replicated deny list. The command
// goes through the leader; every node refuses the certificate at its next
// handshake and closes its connections once it applies the entry.
func (s *Server) CertRevoke(ctx context.Context, req *controlpb.CertRevokeRequest) (*controlpb.CertRevokeResponse, error) {
	serial, err := pki.ParseSerial(req.Serial)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "cert revoke: %v", err)
	}
	if c, ok := CallerFrom(ctx); ok && c.Serial == serial {
		return nil, status.Errorf(codes.FailedPrecondition, "cert revoke: serial %s is the certificate this call came with; revoke it with another admin's", serial)
	}
	res, err := s.Forward.Propose(ctx, &fsmpb.Command{
		Version: fsm.CommandVersion, StampUnixNano: s.now().UnixNano(), Actor: s.author(ctx),
		Body: &fsmpb.Command_CertRevoke{CertRevoke: &fsmpb.CertRevoke{Serial: serial, Name: req.Name, Reason: req.Reason}},
	})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "cert revoke: %v", res.Err)
	}
	return &controlpb.CertRevokeResponse{Serial: serial}, nil
}

// CertRevoked lists the deny list from this node's replica.
func (s *Server) CertRevoked(ctx context.Context, _ *controlpb.CertRevokedRequest) (*controlpb.CertRevokedResponse, error) {
	resp := &controlpb.CertRevokedResponse{}
	for _, r := range s.State.Access().RevokedList() {
		resp.Revoked = append(resp.Revoked, &controlpb.RevokedCertificate{Serial: r.Serial, Name: r.Name, Reason: r.Reason, Actor: r.Actor, TimeUnixNano: r.At.UnixNano()})
	}
	return resp, nil
}

// RevocableCreds wraps the control API's TLS credentials so every
// accepted connection is tracked by its peer's certificate: a revocation
// closes the connections of the certificate it names (streams included),
// and the next handshake refuses it (pki.RefuseRevoked on the TLS
// configuration).
func RevocableCreds(inner credentials.TransportCredentials, t *pki.Tracker) credentials.TransportCredentials {
	return revocableCreds{TransportCredentials: inner, t: t}
}

type revocableCreds struct {
	credentials.TransportCredentials
	t *pki.Tracker
}

func (c revocableCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	if ti, ok := info.(credentials.TLSInfo); ok {
		conn = c.t.Add(conn, ti.State)
	}
	return conn, info, nil
}

func (c revocableCreds) Clone() credentials.TransportCredentials {
	return revocableCreds{TransportCredentials: c.TransportCredentials.Clone(), t: c.t}
}
