package control

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net"
	"time"

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

// tokenPrefix marks a scadad bearer token, so a secret scanner and an
// operator can tell one at sight.
const tokenPrefix = "scadad_"

// TokenCreate makes a bearer token for a producer: 32 random bytes, shown
// in the answer once; the replicated state keeps its SHA-256 only.
func (s *Server) TokenCreate(ctx context.Context, req *controlpb.TokenCreateRequest) (*controlpb.TokenCreateResponse, error) {
	if req.Name == "" {
		return nil, status.Error(codes.InvalidArgument, "tokens create: --name is required")
	}
	if req.ExpiresInSeconds < 0 {
		return nil, status.Error(codes.InvalidArgument, "tokens create: negative expiry")
	}
	var secret [32]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return nil, status.Errorf(codes.Internal, "tokens create: random token: %v", err)
	}
	token := tokenPrefix + base64.RawURLEncoding.EncodeToString(secret[:])
	sum := sha256.Sum256([]byte(token))
	now := s.now()
	var expires int64
	if req.ExpiresInSeconds > 0 {
		expires = now.Add(time.Duration(req.ExpiresInSeconds) * time.Second).UnixNano()
	}
	res, err := s.Forward.Propose(ctx, &fsmpb.Command{
		Version: fsm.CommandVersion, StampUnixNano: now.UnixNano(), Actor: s.author(ctx),
		Body: &fsmpb.Command_TokenCreate{TokenCreate: &fsmpb.TokenCreate{Name: req.Name, Sha256: sum[:], Targets: req.Targets, ExpiresUnixNano: expires}},
	})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "tokens create: %v", res.Err)
	}
	resp := &controlpb.TokenCreateResponse{Name: req.Name, Token: token}
	if expires != 0 {
		resp.ExpiresUnix = time.Unix(0, expires).Unix()
	}
	return resp, nil
}

// TokenList lists the tokens (never their secrets) from this node's replica.
func (s *Server) TokenList(ctx context.Context, _ *controlpb.TokenListRequest) (*controlpb.TokenListResponse, error) {
	resp := &controlpb.TokenListResponse{}
	for _, t := range s.State.Access().TokenList() {
		info := &controlpb.TokenInfo{Name: t.Name, Targets: t.Targets, Actor: t.Actor, CreatedUnix: t.Created.Unix()}
		if !t.Expires.IsZero() {
			info.ExpiresUnix = t.Expires.Unix()
		}
		resp.Tokens = append(resp.Tokens, info)
	}
	return resp, nil
}

// TokenRevoke deletes a token: the next request that carries it is refused.
func (s *Server) TokenRevoke(ctx context.Context, req *controlpb.TokenRevokeRequest) (*controlpb.TokenRevokeResponse, error) {
	res, err := s.Forward.Propose(ctx, &fsmpb.Command{
		Version: fsm.CommandVersion, StampUnixNano: s.now().UnixNano(), Actor: s.author(ctx),
		Body: &fsmpb.Command_TokenRevoke{TokenRevoke: &fsmpb.TokenRevoke{Name: req.Name}},
	})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		if errors.Is(res.Err, fsm.ErrUnknown) {
			return nil, status.Errorf(codes.NotFound, "tokens revoke: %v", res.Err)
		}
		return nil, status.Errorf(codes.InvalidArgument, "tokens revoke: %v", res.Err)
	}
	return &controlpb.TokenRevokeResponse{}, nil
}
