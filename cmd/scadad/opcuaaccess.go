package main

import (
	"context"
	"crypto/x509"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/opcua"
)

// maxReportedRejections bounds the thumbprints a node remembers having
// reported, and rejectionQueue the reports waiting to be proposed: a
// client presenting new certificates without end costs bounded memory and
// at most one proposal per certificate.
const (
	maxReportedRejections = 1024
	rejectionQueue        = 16
)

type accessReader interface{ Access() *fsm.Access }

// proposer sends a command to the leader (control.Forwarder).
type proposer interface {
	Propose(ctx context.Context, cmd *fsmpb.Command) (*fsm.Result, error)
}

// opcuaAccess is the OPC UA server's view of the replicated trust store
// and users: it reads the in-memory access state at every check, and
// proposes this node's refusals so an operator sees them from any node.
type opcuaAccess struct {
	nodeID string
	state  accessReader
	fwd    proposer
	log    zerolog.Logger
	now    func() time.Time

	mu       sync.Mutex
	parsedOf *fsm.Access
	parsed   []*x509.Certificate
	reported map[string]bool

	queue chan *fsmpb.OPCUATrustReject
}

func newOPCUAAccess(nodeID string, state accessReader, fwd proposer, log zerolog.Logger) *opcuaAccess {
	return &opcuaAccess{nodeID: nodeID, state: state, fwd: fwd, log: log, now: time.Now,
		reported: map[string]bool{}, queue: make(chan *fsmpb.OPCUATrustReject, rejectionQueue)}
}

// Trusted parses the trusted certificates once per access state.
func (a *opcuaAccess) Trusted() []*x509.Certificate {
	acc := a.state.Access()
	a.mu.Lock()
	defer a.mu.Unlock()
	if acc == a.parsedOf {
		return a.parsed
	}
	var out []*x509.Certificate
	for _, c := range acc.OPCUATrustedList() {
		cert, err := x509.ParseCertificate(c.DER)
		if err != nil {
			a.log.Warn().Err(err).Str("thumbprint", c.Thumbprint).Msg("a trusted OPC UA certificate in the replicated state does not parse; it is not trusted")
			continue
		}
		out = append(out, cert)
	}
	a.parsedOf, a.parsed = acc, out
	return out
}

// Rejected queues a report of cert unless this node reported it already
// or the replicated list has this node's refusal of it.
func (a *opcuaAccess) Rejected(cert *x509.Certificate, reason string) {
	thumb := fsm.Thumbprint(cert.Raw)
	if r, ok := a.state.Access().OPCUARejected[thumb]; ok {
		for _, n := range r.Nodes {
			if n == a.nodeID {
				return
			}
		}
	}
	a.mu.Lock()
	if a.reported[thumb] {
		a.mu.Unlock()
		return
	}
	if len(a.reported) >= maxReportedRejections {
		a.reported = map[string]bool{}
	}
	a.reported[thumb] = true
	a.mu.Unlock()
	rej := &fsmpb.OPCUATrustReject{Der: cert.Raw, NodeId: a.nodeID, Subject: cert.Subject.String(), Reason: reason}
	if len(cert.URIs) > 0 {
		rej.ApplicationUri = cert.URIs[0].String()
	}
	select {
	case a.queue <- rej:
	default:
		a.forget(thumb) // full: the next refusal tries again
	}
}

func (a *opcuaAccess) forget(thumb string) {
	a.mu.Lock()
	delete(a.reported, thumb)
	a.mu.Unlock()
}

// run proposes the queued refusals through the leader.
func (a *opcuaAccess) run(ctx context.Context) error {
	for {
		var rej *fsmpb.OPCUATrustReject
		select {
		case <-ctx.Done():
			return nil
		case rej = <-a.queue:
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := a.fwd.Propose(pctx, &fsmpb.Command{Version: fsm.CommandVersion, StampUnixNano: a.now().UnixNano(), Actor: a.nodeID,
			Body: &fsmpb.Command_OpcuaTrustReject{OpcuaTrustReject: rej}})
		cancel()
		if err == nil && res.Err != nil {
			err = res.Err
		}
		if err != nil {
			a.forget(fsm.Thumbprint(rej.Der))
			a.log.Warn().Err(err).Str("thumbprint", fsm.Thumbprint(rej.Der)).Msg("a refused OPC UA client certificate is not on the replicated rejected list (scadactl opcua trust rejected); its next refusal tries again")
		}
	}
}

// User finds a replicated OPC UA user.
func (a *opcuaAccess) User(name string) (opcua.StoredUser, bool) {
	u, ok := a.state.Access().OPCUAUsers[name]
	return opcua.StoredUser{Name: u.Name, Hash: u.Hash, CanWrite: u.CanWrite}, ok
}
