package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/clock"
	"github.com/scadad/scadad/opcua"
)

// maxReportedRejections bounds the thumbprints a node remembers having
// reported, and rejectionQueue the reports waiting to be proposed: a
// client presenting new certificates without end costs bounded memory.
// rejectionBurst proposals may go at once, then one per rejectionEvery,
// and a warning about refusals left off the list is logged at most once
// per rejectionWarnEvery: a node refusing a thousand certificates, or one
// certificate a thousand times while the list is full or no leader
// answers, proposes and warns a bounded number of times.
const (
	maxReportedRejections = 1024
	rejectionQueue        = 16
	rejectionBurst        = 16
	rejectionEvery        = 5 * time.Second
	rejectionWarnEvery    = time.Minute
)

// Why a refusal is not on the replicated list (metric label values).
const (
	rejectionRecorded   = "recorded"
	rejectionListFull   = "list_full"
	rejectionRateLimit  = "rate_limited"
	rejectionQueueFull  = "queue_full"
	rejectionProposeErr = "propose_failed"
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
	nodeID  string
	state   accessReader
	fwd     proposer
	log     zerolog.Logger
	clock   clock.Clock
	reports *prometheus.CounterVec

	mu       sync.Mutex
	parsedOf *fsm.Access
	parsed   []*x509.Certificate
	reported map[string]bool
	// tokens and refilled are the proposals' token bucket.
	tokens   float64
	refilled time.Time
	// lastWarn and unwarned space the warnings about refusals left off
	// the list; unwarned counts those since the last warning.
	lastWarn time.Time
	unwarned map[string]int

	queue chan *fsmpb.OPCUATrustReject
}

// newOPCUAAccess always returns a working access; the error says its
// metric could not be registered.
func newOPCUAAccess(nodeID string, state accessReader, fwd proposer, log zerolog.Logger, reg prometheus.Registerer, clk clock.Clock) (*opcuaAccess, error) {
	reports := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "scadad_opcua_trust_rejections_total",
		Help: "OPC UA client certificates this node refused, by what became of its report to the replicated rejected list (scadactl opcua trust rejected): recorded, or left off because the list is full, the reports are rate-limited, the queue is full, or the proposal failed.",
	}, []string{"result"})
	for _, r := range []string{rejectionRecorded, rejectionListFull, rejectionRateLimit, rejectionQueueFull, rejectionProposeErr} {
		reports.WithLabelValues(r)
	}
	a := &opcuaAccess{nodeID: nodeID, state: state, fwd: fwd, log: log, clock: clk, reports: reports,
		reported: map[string]bool{}, tokens: rejectionBurst, refilled: clk.Now(), unwarned: map[string]int{},
		queue: make(chan *fsmpb.OPCUATrustReject, rejectionQueue)}
	if err := reg.Register(reports); err != nil {
		// The access works without its metric.
		return a, fmt.Errorf("OPC UA rejection metrics: %w", err)
	}
	return a, nil
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

// Rejected queues a report of cert unless this node reported it already,
// the replicated list has this node's refusal of it, the list is full, or
// the node proposed its share of reports lately.
func (a *opcuaAccess) Rejected(cert *x509.Certificate, reason string) {
	thumb := fsm.Thumbprint(cert.Raw)
	acc := a.state.Access()
	r, listed := acc.OPCUARejected[thumb]
	if listed && slices.Contains(r.Nodes, a.nodeID) {
		return
	}
	a.mu.Lock()
	if a.reported[thumb] {
		a.mu.Unlock()
		return
	}
	if !listed && len(acc.OPCUARejected) >= fsm.MaxOPCUARejected {
		// The leader would refuse it: a full list takes no new
		// certificate until an operator removes some.
		a.leftOffLocked(rejectionListFull, nil, thumb)
		a.mu.Unlock()
		return
	}
	if !a.takeTokenLocked() {
		a.leftOffLocked(rejectionRateLimit, nil, thumb)
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
		a.leftOff(rejectionQueueFull, nil, thumb) // the next refusal tries again
	}
}

// takeTokenLocked takes one proposal from the bucket, refilled at one per
// rejectionEvery up to rejectionBurst.
func (a *opcuaAccess) takeTokenLocked() bool {
	now := a.clock.Now()
	if elapsed := now.Sub(a.refilled); elapsed > 0 {
		a.tokens = min(rejectionBurst, a.tokens+float64(elapsed)/float64(rejectionEvery))
		a.refilled = now
	}
	if a.tokens < 1 {
		return false
	}
	a.tokens--
	return true
}

// leftOff counts a refusal that is not on the replicated list and forgets
// that it was reported, so a later refusal of the certificate tries again.
func (a *opcuaAccess) leftOff(why string, err error, thumb string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.leftOffLocked(why, err, thumb)
}

// leftOffLocked warns at most once per rejectionWarnEvery, with how many
// refusals of each kind were left off since the last warning.
func (a *opcuaAccess) leftOffLocked(why string, err error, thumb string) {
	delete(a.reported, thumb)
	a.reports.WithLabelValues(why).Inc()
	a.unwarned[why]++
	now := a.clock.Now()
	if !a.lastWarn.IsZero() && now.Sub(a.lastWarn) < rejectionWarnEvery {
		return
	}
	e := a.log.Warn().Str("thumbprint", thumb).Str("last_reason", why)
	if err != nil {
		e = e.Err(err)
	}
	for k, n := range a.unwarned {
		e = e.Int(k, n)
	}
	e.Int("max_rejected", fsm.MaxOPCUARejected).Dur("next_warning_after", rejectionWarnEvery).
		Msg("refused OPC UA client certificates are not on the replicated rejected list (scadactl opcua trust rejected): counted by why since the last such warning; a full list takes none until some are removed (scadactl opcua trust remove), and a later refusal of the others tries again")
	a.lastWarn, a.unwarned = now, map[string]int{}
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
		res, err := a.fwd.Propose(pctx, &fsmpb.Command{Version: fsm.CommandVersion, StampUnixNano: a.clock.Now().UnixNano(), Actor: a.nodeID,
			Body: &fsmpb.Command_OpcuaTrustReject{OpcuaTrustReject: rej}})
		cancel()
		if err == nil && res.Err != nil {
			err = res.Err
		}
		if err != nil {
			a.leftOff(rejectionProposeErr, err, fsm.Thumbprint(rej.Der))
			continue
		}
		a.reports.WithLabelValues(rejectionRecorded).Inc()
	}
}

// User finds a replicated OPC UA user.
func (a *opcuaAccess) User(name string) (opcua.StoredUser, bool) {
	u, ok := a.state.Access().OPCUAUsers[name]
	return opcua.StoredUser{Name: u.Name, Hash: u.Hash, CanWrite: u.CanWrite}, ok
}
