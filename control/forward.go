package control

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/grpcdial"
	"github.com/scadad/scadad/role"
)

// forwardedKey marks a request a follower forwarded, so a node that lost
// leadership meanwhile answers Unavailable instead of forwarding again.
const forwardedKey = "x-scadad-forwarded"

// LocalApplier commits encoded commands through the local Raft node, which
// must be the leader.
type LocalApplier interface {
	Apply(ctx context.Context, cmd []byte) (interface{}, error)
}

// RoleSource is the role stream the forwarder follows.
type RoleSource interface {
	Current() role.State
	Watch() (<-chan role.State, func())
}

// Forwarder knows where the leader's control API is and keeps one client
// connection per peer.
type Forwarder struct {
	self    string
	apiAddr map[string]string // node id → control API address
	tls     *tls.Config
	roles   RoleSource
	local   LocalApplier
	// noLeaderWait is how long a call waits for a leader to be known
	// before it fails Unavailable, whatever time its caller gave it.
	noLeaderWait time.Duration

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewForwarder returns a Forwarder for the node self. apiAddrs maps every
// configured node id to its control API address; clientTLS authenticates
// this node to its peers.
//
// noLeaderWait bounds how long a call waits while no leader is known
// (0: until the caller's deadline). Give it about two election timeouts:
// long enough for an election to finish, so a failover costs a caller
// nothing, short enough that a cluster without a quorum answers
// Unavailable at once instead of after the caller's whole timeout.
func NewForwarder(self string, apiAddrs map[string]string, clientTLS *tls.Config, roles RoleSource, local LocalApplier, noLeaderWait time.Duration) *Forwarder {
	return &Forwarder{self: self, apiAddr: apiAddrs, tls: clientTLS, roles: roles, local: local, noLeaderWait: noLeaderWait,
		conns: make(map[string]*grpc.ClientConn)}
}

// Close drops the peer connections.
func (f *Forwarder) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = map[string]*grpc.ClientConn{}
}

// errNoLeader is returned while no leader is known.
var errNoLeader = errors.New("no leader known (the cluster has no quorum or is electing)")

// noLeaderError: no leader was known for the whole noLeaderWait. It is
// Unavailable (worth a retry later) but not retried within the call.
type noLeaderError struct{ waited time.Duration }

func (e noLeaderError) Error() string {
	return fmt.Sprintf("%v: none for %v", errNoLeader, e.waited)
}
func (e noLeaderError) Unwrap() error { return errNoLeader }
func (e noLeaderError) GRPCStatus() *status.Status {
	return status.New(codes.Unavailable, e.Error())
}

// leader returns a client for the current leader and its id, or nil when
// this node is the leader. It waits for a leader up to ctx's deadline or
// noLeaderWait, whichever ends first.
func (f *Forwarder) leader(ctx context.Context) (controlpb.ControlClient, string, error) {
	if f.roles.Current().Role == role.Active {
		return nil, "", nil // the common case, without a watch to set up
	}
	watch, stop := f.roles.Watch()
	defer stop()
	var giveUp <-chan time.Time
	if f.noLeaderWait > 0 {
		t := time.NewTimer(f.noLeaderWait)
		defer t.Stop()
		giveUp = t.C
	}
	for {
		st := f.roles.Current()
		switch {
		case st.Role == role.Active:
			return nil, "", nil
		case st.Leader != "" && st.Leader != f.self:
			c, err := f.client(st.Leader)
			return c, st.Leader, err
		}
		select {
		case <-ctx.Done():
			return nil, "", status.Errorf(codes.Unavailable, "%v: %v", errNoLeader, ctx.Err())
		case <-giveUp:
			return nil, "", noLeaderError{waited: f.noLeaderWait}
		case <-watch:
		}
	}
}

// errLeaderMoved ends a call forwarded to a leader that is no longer the
// leader this node knows.
var errLeaderMoved = errors.New("the leader changed while the call was in flight")

// leaderMoved turns the end of a forwarded call cut short by whileLeads
// into what it is: the leader changed, try again (Unavailable, which
// scadactl and the proposers treat as worth a retry), not "canceled".
func leaderMoved(ctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(ctx), errLeaderMoved) {
		return status.Errorf(codes.Unavailable, "%v; retry: the new leader answers", errLeaderMoved)
	}
	return err
}

func leaderMovedUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return leaderMoved(ctx, invoker(ctx, method, req, reply, cc, opts...))
}

func leaderMovedStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, leaderMoved(ctx, err)
	}
	return leaderMovedClientStream{ClientStream: s, ctx: ctx}, nil
}

// leaderMovedClientStream maps a forwarded stream's receive error like
// leaderMovedUnary does a call's.
type leaderMovedClientStream struct {
	grpc.ClientStream
	ctx context.Context
}

func (s leaderMovedClientStream) RecvMsg(m any) error {
	return leaderMoved(s.ctx, s.ClientStream.RecvMsg(m))
}

// whileLeads returns a context that ends, besides with ctx, once this node
// no longer takes id for the leader: it became the leader itself, or
// another node did. A call forwarded to a leader that froze (a paused VM)
// then gives way at the failover, about a second, instead of waiting out
// its whole deadline for a node that cannot commit any more.
func (f *Forwarder) whileLeads(ctx context.Context, id string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	watch, stop := f.roles.Watch()
	go func() {
		defer stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-watch:
				if st := f.roles.Current(); st.Role == role.Active || (st.Leader != "" && st.Leader != id) {
					cancel(errLeaderMoved)
					return
				}
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}

// Client returns a control API client for the node id, authenticated with
// this node's certificate.
func (f *Forwarder) Client(id string) (controlpb.ControlClient, error) { return f.client(id) }

// HealClient returns a client of the node id's Heal service, on the same
// connection as its control API.
func (f *Forwarder) HealClient(id string) (controlpb.HealClient, error) {
	conn, err := f.conn(id)
	if err != nil {
		return nil, err
	}
	return controlpb.NewHealClient(conn), nil
}

// Reset closes the connection to the node id, if any, so the next call
// dials a new one. Calls in flight on it fail.
func (f *Forwarder) Reset(id string) {
	addr := f.apiAddr[id]
	f.mu.Lock()
	conn, ok := f.conns[addr]
	delete(f.conns, addr)
	f.mu.Unlock()
	if ok {
		_ = conn.Close()
	}
}

func (f *Forwarder) client(id string) (controlpb.ControlClient, error) {
	conn, err := f.conn(id)
	if err != nil {
		return nil, err
	}
	return controlpb.NewControlClient(conn), nil
}

// conn keeps one connection per peer; snapshots and heal hand-overs can be
// large, hence the message size limits.
func (f *Forwarder) conn(id string) (*grpc.ClientConn, error) {
	addr, ok := f.apiAddr[id]
	if !ok || addr == "" {
		return nil, status.Errorf(codes.Unavailable, "node %q has no control API address in this node's config", id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	conn, ok := f.conns[addr]
	if !ok {
		var err error
		conn, err = grpc.NewClient(addr, append(grpcdial.ControlAPI(f.tls),
			grpc.WithUnaryInterceptor(leaderMovedUnary), grpc.WithStreamInterceptor(leaderMovedStream))...)
		if err != nil {
			return nil, fmt.Errorf("dial node %s at %s: %w", id, addr, err)
		}
		f.conns[addr] = conn
	}
	return conn, nil
}

// onBehalfKey names, on a request a follower forwards, who sent it to the
// follower: the leader records that person, not the follower's node
// certificate, as the author of a deploy.
const onBehalfKey = "x-scadad-on-behalf-of"

// forwardContext marks ctx as forwarded for the leader.
func forwardContext(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, forwardedKey, "1")
}

// wasForwarded reports whether an incoming request came from a follower.
func wasForwarded(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(forwardedKey)) > 0
}

// Propose commits cmd on the leader, from whichever node this is, and
// returns the FSM's verdict. It rides out leader changes until ctx ends:
// enqueues and acks are idempotent, and a deploy's compare-and-set makes a
// repeated attempt fail cleanly rather than apply twice.
func (f *Forwarder) Propose(ctx context.Context, cmd *fsmpb.Command) (*fsm.Result, error) {
	data, err := fsm.Encode(cmd)
	if err != nil {
		return nil, fmt.Errorf("encode command: %w", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	for {
		res, err := f.proposeOnce(ctx, data)
		if err == nil || !retryable(err) || errors.Is(err, errNoLeader) {
			return res, err
		}
		select {
		case <-ctx.Done():
			return nil, status.Errorf(codes.Unavailable, "commit through the leader: %v (last error: %v)", ctx.Err(), err)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func (f *Forwarder) proposeOnce(ctx context.Context, data []byte) (*fsm.Result, error) {
	leader, id, err := f.leader(ctx)
	if err != nil {
		return nil, err
	}
	if leader == nil {
		out, err := f.local.Apply(ctx, data)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "apply on this node: %v", err)
		}
		res, ok := out.(*fsm.Result)
		if !ok {
			return nil, fmt.Errorf("apply returned %T, not an FSM result", out)
		}
		return res, nil
	}
	actx, done := f.whileLeads(ctx, id)
	defer done()
	// A leader that changes meanwhile ends the call Unavailable, and
	// Propose retries against the new one: enqueues and acks are
	// idempotent, and a deploy's compare-and-set fails cleanly.
	resp, err := leader.Apply(forwardContext(actx), &controlpb.ApplyRequest{Command: data})
	if err != nil {
		return nil, err
	}
	return decodeResult(resp)
}

// retryable reports whether a failed proposal may succeed on a later try:
// the leader moved, was unreachable, or was not known yet.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

// Audit commits an audit entry.
func (f *Forwarder) Audit(ctx context.Context, actor, kind, detail string) error {
	res, err := f.Propose(ctx, &fsmpb.Command{
		Version:       fsm.CommandVersion,
		StampUnixNano: time.Now().UnixNano(),
		Actor:         actor,
		Body:          &fsmpb.Command_Audit{Audit: &fsmpb.Audit{Kind: kind, Detail: detail}},
	})
	if err != nil {
		return err
	}
	return res.Err
}
