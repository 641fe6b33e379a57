package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/deploy"
	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/raftnode"
	"github.com/scadad/scadad/role"
)

// Raft is what the server needs of the local Raft node.
type Raft interface {
	LocalApplier
	LeadershipTransfer(ctx context.Context, to string) error
	AddVoter(ctx context.Context, id, addr string) error
	RemoveServer(ctx context.Context, id string) error
	Members() ([]raftnode.MemberStatus, error)
	Stats() raftnode.Stats
	ManualOverride(ctx context.Context, force bool) error
}

// Restorer installs a verified snapshot cluster-wide (leader only);
// appliedIndex is the index recorded inside it.
type Restorer interface {
	RestoreSnapshot(ctx context.Context, appliedIndex uint64, size int64, r io.Reader) error
}

// State is the FSM read side the server needs.
type State interface {
	Meta() fsm.Meta
	Snapshot() (raft.FSMSnapshot, error)
	Audit(afterSeq uint64, limit int) ([]fsm.AuditEntry, error)
	Access() *fsm.Access
	deploy.State
}

// StoreForward is the store-and-forward surface of the control API.
type StoreForward interface {
	Enqueue(ctx context.Context, target string, payload []byte, id string) (string, bool, error)
	// Submit hands a message to the group committer without waiting for
	// its commit; wait gives the outcome as Enqueue would (a refusal at
	// once).
	Submit(ctx context.Context, target string, payload []byte, id string) (wait func(context.Context) (string, bool, error))
	Stats(ctx context.Context) ([]*controlpb.SFTargetStats, error)
	List(ctx context.Context, target string, parked bool, limit int) ([]*controlpb.SFMessage, error)
	Retry(ctx context.Context, ids []string, allOfTarget string) (int, error)
	Discard(ctx context.Context, ids []string, allOfTarget string) (int, error)
}

// Features is what Status shows of feature levels.
type Features interface {
	NodeLevels() ([]fsm.NodeLevel, error)
	// Level is the highest level this node applies; Blocked why it
	// stopped applying ("" while it applies).
	Level() fsm.Level
	Blocked() string
}

// Member is one configured member as the node config names it.
type Member struct {
	ID       string
	RaftAddr string
	APIAddr  string
	Witness  bool
}

// memberNamed finds the configured member called id: a caller whose
// certificate names one is a cluster node, not an operator.
func memberNamed(members []Member, id string) (Member, bool) {
	for _, m := range members {
		if m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// Server implements controlpb.ControlServer.
type Server struct {
	controlpb.UnimplementedControlServer

	NodeID   string
	Mode     string
	Version  string
	Revision string
	// Features reports feature levels: this node's, the members' records
	// and why applying stopped; nil leaves them out.
	Features   Features
	Configured []Member
	Raft       Raft
	Restorer   Restorer
	Roles      RoleSource
	State      State
	Forward    *Forwarder
	Pusher     *deploy.Pusher
	SF         StoreForward
	// Alarms serves the alarm RPCs; nil answers Unimplemented.
	Alarms  Alarms
	TempDir string
	Log     zerolog.Logger
	// OPCUA reports this node's ServiceLevel and its probe's verdicts on
	// the peers; nil on a node without OPC UA.
	OPCUA func() (uint32, []*controlpb.OPCUAVerdict)
	// Connections reports the field data connections this node runs; nil
	// leaves them out.
	Connections func() []*controlpb.DataConnectionStatus
	// CertNotAfter and CANotAfter are when this node's certificate and the
	// site CA expire (zero: unknown).
	CertNotAfter, CANotAfter time.Time
	// Now stamps the commands the server builds (time.Now when nil).
	Now func() time.Time
	// HTTPAddr is this node's HTTP listener as configured (empty: none).
	HTTPAddr string
	// Checkpoints lists the cross-node state checkpoints of this node's
	// replica, newest first (Check); nil: none.
	Checkpoints func() ([]*fsmpb.CheckpointRecord, error)
}

func (s *Server) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

// leaderOr runs local on the leader, or returns the leader's client for the
// caller to forward to. A request that was already forwarded once is not
// forwarded again.
func (s *Server) leaderOr(ctx context.Context) (controlpb.ControlClient, context.Context, error) {
	return s.forwardOr(ctx, true)
}

// forwardOr is leaderOr; giveWay says whether the forwarded call ends when
// the leader changes meanwhile. A failover, or removing the leader from
// the cluster, changes the leader: that is its success, not a reason to
// give up on it.
func (s *Server) forwardOr(ctx context.Context, giveWay bool) (controlpb.ControlClient, context.Context, error) {
	if s.Roles.Current().Role == role.Active {
		return nil, ctx, nil
	}
	if wasForwarded(ctx) {
		return nil, ctx, status.Errorf(codes.Unavailable, "%s is no longer the leader; retry", s.NodeID)
	}
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, id, err := s.Forward.leader(wait)
	if err != nil || c == nil {
		return c, ctx, err
	}
	fctx := onBehalfContext(ctx, forwardContext(ctx))
	if giveWay {
		// The forwarded call gives way if the leader changes meanwhile (it
		// may have frozen); its goroutine ends with the incoming call.
		fctx, _ = s.Forward.whileLeads(fctx, id)
	}
	return c, fctx, nil
}

// author is who sent a request, as the audit log names it: the caller's
// certificate name, "alice via node-b" for a call a follower forwarded, or
// the node itself. A member of the previous release forwards the name
// alone, which only a member may do.
func (s *Server) author(ctx context.Context) string {
	c, ok := CallerFrom(ctx)
	if !ok {
		c = Caller{Name: actor(ctx)}
		_, c.Node = memberNamed(s.Configured, c.Name)
	}
	if c.Node {
		md, _ := metadata.FromIncomingContext(ctx)
		for _, behalf := range md.Get(onBehalfKey) {
			if behalf != "" {
				return behalf + " via " + c.Name
			}
		}
	}
	return c.String()
}

// Status reports this node and what it knows of the cluster.
func (s *Server) Status(ctx context.Context, _ *controlpb.StatusRequest) (*controlpb.StatusResponse, error) {
	st := s.Roles.Current()
	rs := s.Raft.Stats()
	meta := s.State.Meta()
	override := ""
	if rs.OverridePending {
		override = "override done, cluster epoch bump pending"
	}
	resp := &controlpb.StatusResponse{
		NodeId:        s.NodeID,
		Role:          st.Role.String(),
		Term:          rs.Term,
		ClusterEpoch:  meta.ClusterEpoch,
		LeaderId:      st.Leader,
		CommitIndex:   rs.CommitIndex,
		AppliedIndex:  rs.AppliedIndex,
		Mode:          s.Mode,
		Voters:        int32(st.Voters),
		LastContactMs: -1,
		RaftState:     rs.State,
		Version:       s.Version,
		Revision:      s.Revision,
		GoVersion:     runtime.Version(),
		OverrideState: override,
		HttpAddr:      s.HTTPAddr,
	}
	switch {
	case st.Role == role.Active:
		resp.LastContactMs = 0
	case !rs.LastContact.IsZero():
		resp.LastContactMs = time.Since(rs.LastContact).Milliseconds()
	}
	for _, m := range s.Configured {
		if m.ID == st.Leader {
			resp.LeaderApiAddr = m.APIAddr
		}
	}
	if s.OPCUA != nil {
		resp.ServiceLevel, resp.OpcuaVerdicts = s.OPCUA()
	}
	if s.Connections != nil {
		resp.Connections = s.Connections()
	}
	if !s.CertNotAfter.IsZero() {
		resp.CertNotAfterUnix = s.CertNotAfter.Unix()
	}
	if !s.CANotAfter.IsZero() {
		resp.CaNotAfterUnix = s.CANotAfter.Unix()
	}
	if d, err := s.State.Deployment(deploy.DefaultTarget); err == nil {
		resp.DeployRevision = d.Revision
	}
	members, err := s.members(st)
	if err != nil {
		return nil, err
	}
	resp.Members = members
	if s.Features != nil {
		resp.FeatureLevel = uint32(s.Features.Level())
		resp.ApplyBlocked = s.Features.Blocked()
		var ids []string
		for _, m := range members {
			if m.InRaft {
				ids = append(ids, m.Id)
			}
		}
		if recs, err := s.Features.NodeLevels(); err == nil {
			lvl, low := fsm.ClusterLevel(recs, ids)
			resp.ClusterFeatureLevel, resp.FeatureLevelLowest = uint32(lvl), low.NodeID
		}
	}
	return resp, nil
}

func (s *Server) members(st role.State) ([]*controlpb.MemberStatus, error) {
	ms, err := s.Raft.Members()
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "read raft configuration: %v", err)
	}
	api := map[string]string{}
	for _, m := range s.Configured {
		api[m.ID] = m.APIAddr
	}
	levels := map[string]fsm.NodeLevel{}
	if s.Features != nil {
		// Best effort: the members list stands without the records.
		recs, _ := s.Features.NodeLevels()
		for _, r := range recs {
			levels[r.NodeID] = r
		}
	}
	var out []*controlpb.MemberStatus
	for _, m := range ms {
		_, configured := api[m.ID]
		ms := &controlpb.MemberStatus{
			Id: m.ID, RaftAddr: m.Addr, ApiAddr: api[m.ID], Suffrage: m.Suffrage, Leader: m.Leader,
			Witness: m.Witness, Configured: configured, InRaft: m.Suffrage != "absent",
			Reachable: m.Reachable || m.Self,
			Version:   levels[m.ID].Version, FeatureLevel: uint32(levels[m.ID].Level),
		}
		if !m.ReachableSince.IsZero() {
			ms.ReachableSinceUnixNano = m.ReachableSince.UnixNano()
		}
		if !m.LastContact.IsZero() {
			ms.LastContactUnixNano = m.LastContact.UnixNano()
		}
		out = append(out, ms)
	}
	return out, nil
}

// Members lists configured and Raft members.
func (s *Server) Members(ctx context.Context, _ *controlpb.MembersRequest) (*controlpb.MembersResponse, error) {
	m, err := s.members(s.Roles.Current())
	if err != nil {
		return nil, err
	}
	return &controlpb.MembersResponse{Members: m}, nil
}

// AddMember adds a voter (or non-voter) through the leader.
func (s *Server) AddMember(ctx context.Context, req *controlpb.AddMemberRequest) (*controlpb.AddMemberResponse, error) {
	if req.Id == "" || req.RaftAddr == "" {
		return nil, status.Error(codes.InvalidArgument, "add member: id and raft_addr are required")
	}
	if c, fctx, err := s.leaderOr(ctx); err != nil || c != nil {
		if err != nil {
			return nil, err
		}
		return c.AddMember(fctx, req)
	}
	if req.Nonvoter {
		return nil, status.Error(codes.Unimplemented, "add member: non-voting members are not supported; every member is a voter or the witness")
	}
	if err := s.Raft.AddVoter(ctx, req.Id, req.RaftAddr); err != nil {
		return nil, status.Errorf(codes.Unavailable, "add member %s: %v", req.Id, err)
	}
	s.audit(ctx, "member-add", fmt.Sprintf("%s at %s (nonvoter=%v)", req.Id, req.RaftAddr, req.Nonvoter))
	return &controlpb.AddMemberResponse{}, nil
}

// RemoveMember removes a member through the leader.
func (s *Server) RemoveMember(ctx context.Context, req *controlpb.RemoveMemberRequest) (*controlpb.RemoveMemberResponse, error) {
	if req.Id == "" {
		return nil, status.Error(codes.InvalidArgument, "remove member: id is required")
	}
	if c, fctx, err := s.forwardOr(ctx, false); err != nil || c != nil {
		if err != nil {
			return nil, err
		}
		return c.RemoveMember(fctx, req)
	}
	ms, err := s.Raft.Members()
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "remove member: %v", err)
	}
	found := false
	for _, m := range ms {
		found = found || (m.ID == req.Id && m.Suffrage != "absent")
	}
	if !found {
		return nil, status.Errorf(codes.NotFound, "remove member: %q is not in the raft configuration", req.Id)
	}
	if err := s.Raft.RemoveServer(ctx, req.Id); err != nil {
		return nil, status.Errorf(codes.Unavailable, "remove member %s: %v", req.Id, err)
	}
	s.audit(ctx, "member-remove", req.Id)
	return &controlpb.RemoveMemberResponse{}, nil
}

// Failover moves leadership away from the leader.
func (s *Server) Failover(ctx context.Context, req *controlpb.FailoverRequest) (*controlpb.FailoverResponse, error) {
	if c, fctx, err := s.forwardOr(ctx, false); err != nil || c != nil {
		if err != nil {
			return nil, err
		}
		return c.Failover(fctx, req)
	}
	if req.To == s.NodeID {
		return nil, status.Errorf(codes.FailedPrecondition, "failover: %s is already Active", s.NodeID)
	}
	if req.To != "" {
		known := false
		for _, m := range s.Configured {
			if m.ID == req.To {
				known = true
				if m.Witness {
					return nil, status.Errorf(codes.FailedPrecondition, "failover: %s is the witness and never keeps the Active role", req.To)
				}
			}
		}
		if !known {
			return nil, status.Errorf(codes.NotFound, "failover: no member %q", req.To)
		}
	}
	to := "the voter heard from most recently (no --to)"
	if req.To != "" {
		to = strconv.Quote(req.To)
	}
	s.audit(ctx, "failover", fmt.Sprintf("requested from %s to %s", s.NodeID, to))
	if err := s.Raft.LeadershipTransfer(ctx, req.To); err != nil {
		return nil, status.Errorf(codes.Unavailable, "failover: %v", err)
	}
	// Wait until a new leader is known so the answer names it.
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	watch, stop := s.Roles.Watch()
	defer stop()
	for {
		st := s.Roles.Current()
		if st.Leader != "" && st.Leader != s.NodeID {
			return &controlpb.FailoverResponse{OldLeader: s.NodeID, NewLeader: st.Leader}, nil
		}
		select {
		case <-wait.Done():
			return &controlpb.FailoverResponse{OldLeader: s.NodeID, NewLeader: "(not yet known)"}, nil
		case <-watch:
		}
	}
}

// Override makes this node the sole voter.
func (s *Server) Override(ctx context.Context, req *controlpb.OverrideRequest) (*controlpb.OverrideResponse, error) {
	if err := s.Raft.ManualOverride(ctx, req.Force); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "override on %s: %v", s.NodeID, err)
	}
	return &controlpb.OverrideResponse{ClusterEpoch: s.State.Meta().ClusterEpoch}, nil
}

// Apply commits a forwarded command; only the leader answers.
func (s *Server) Apply(ctx context.Context, req *controlpb.ApplyRequest) (*controlpb.ApplyResponse, error) {
	// Raw commands bypass every validation the typed RPCs do, so only the
	// cluster's own nodes may send them, never an operator certificate.
	caller := actor(ctx)
	if _, member := memberNamed(s.Configured, caller); !member {
		return nil, status.Errorf(codes.PermissionDenied, "apply: %q is not a cluster member; raw commands are for forwarding between nodes", caller)
	}
	if s.Roles.Current().Role != role.Active {
		return nil, status.Errorf(codes.Unavailable, "%s is not the leader", s.NodeID)
	}
	out, err := s.Raft.Apply(ctx, req.Command)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "apply on leader %s: %v", s.NodeID, err)
	}
	res, ok := out.(*fsm.Result)
	if !ok {
		return nil, status.Errorf(codes.Internal, "apply returned %T", out)
	}
	return encodeResult(res)
}

// Audit lists audit entries from this node's replica.
func (s *Server) Audit(ctx context.Context, req *controlpb.AuditRequest) (*controlpb.AuditResponse, error) {
	limit := int(req.Limit)
	if limit <= 0 || limit > 10000 {
		limit = 1000
	}
	entries, err := s.State.Audit(req.AfterSeq, limit)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read audit: %v", err)
	}
	resp := &controlpb.AuditResponse{}
	for _, e := range entries {
		resp.Entries = append(resp.Entries, &controlpb.AuditEntry{Seq: e.Seq, TimeUnixNano: e.At.UnixNano(), Kind: e.Kind, Actor: e.Actor, Detail: e.Detail})
	}
	return resp, nil
}

// audit records an operator action; failures are logged, not fatal, since
// the action itself already happened.
func (s *Server) audit(ctx context.Context, kind, detail string) {
	if err := s.Forward.Audit(ctx, s.author(ctx), kind, detail); err != nil {
		s.Log.Warn().Err(err).Str("kind", kind).Msg("audit entry not recorded")
	}
}

// SnapshotSave streams a consistent snapshot of the leader's state, which
// holds every write acknowledged before the request (a follower's may lag
// by the last few, so a follower forwards), or of this node's own state
// when the request says local.
func (s *Server) SnapshotSave(req *controlpb.SnapshotSaveRequest, stream controlpb.Control_SnapshotSaveServer) error {
	if !req.Local {
		c, fctx, err := s.leaderOr(stream.Context())
		if err == nil && c != nil {
			err = forwardSave(fctx, c, req, stream)
			if err == nil {
				return nil
			}
		}
		if err != nil {
			st := status.Convert(err)
			return status.Errorf(st.Code(), "snapshot save: no backup from the leader, whose state holds every acknowledged write (%s); `snapshot save --local` saves this node's own state, which may lack the last of them", st.Message())
		}
	}
	snap, err := s.State.Snapshot()
	if err != nil {
		return status.Errorf(codes.Internal, "snapshot of %s: %v", s.NodeID, err)
	}
	defer snap.Release()
	sink := &streamSink{send: func(p []byte) error {
		return stream.Send(&controlpb.SnapshotChunk{Data: p})
	}}
	if err := snap.Persist(sink); err != nil {
		return status.Errorf(codes.Internal, "snapshot of %s: %v", s.NodeID, err)
	}
	return sink.flush()
}

// SnapshotRestore receives a snapshot, verifies it, and installs it through
// the leader. A snapshot that does not verify changes nothing.
func (s *Server) SnapshotRestore(stream controlpb.Control_SnapshotRestoreServer) error {
	ctx := stream.Context()
	tmp, err := os.CreateTemp(s.TempDir, "restore-*.snap")
	if err != nil {
		return status.Errorf(codes.Internal, "snapshot restore: %v", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	var n int64
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		m, err := tmp.Write(chunk.Data)
		n += int64(m)
		if err != nil {
			return status.Errorf(codes.ResourceExhausted, "snapshot restore: spool to %s: %v", filepath.Dir(tmp.Name()), err)
		}
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return status.Errorf(codes.Internal, "snapshot restore: %v", err)
	}
	info, err := fsm.InspectSnapshot(tmp)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "snapshot restore: refused, the snapshot does not verify (state untouched): %v", err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return status.Errorf(codes.Internal, "snapshot restore: %v", err)
	}
	c, fctx, err := s.leaderOr(ctx)
	if err != nil {
		return err
	}
	if c != nil {
		return forwardRestore(fctx, c, tmp, n, stream)
	}
	if err := s.Restorer.RestoreSnapshot(ctx, info.Meta.AppliedIndex, n, tmp); err != nil {
		return status.Errorf(codes.Internal, "snapshot restore: %v", err)
	}
	s.audit(ctx, "snapshot-restore", fmt.Sprintf("restored a snapshot of %d bytes (applied index %d inside)", n, info.Meta.AppliedIndex))
	return stream.SendAndClose(&controlpb.SnapshotRestoreResponse{AppliedIndex: s.State.Meta().AppliedIndex, Bytes: n})
}

// forwardSave relays the leader's snapshot stream to the caller.
func forwardSave(ctx context.Context, c controlpb.ControlClient, req *controlpb.SnapshotSaveRequest, out controlpb.Control_SnapshotSaveServer) error {
	in, err := c.SnapshotSave(ctx, req)
	if err != nil {
		return err
	}
	for {
		chunk, err := in.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := out.Send(chunk); err != nil {
			return err
		}
	}
}

func forwardRestore(ctx context.Context, c controlpb.ControlClient, r io.Reader, size int64, in controlpb.Control_SnapshotRestoreServer) error {
	out, err := c.SnapshotRestore(ctx)
	if err != nil {
		return err
	}
	buf := make([]byte, 256<<10)
	first := true
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			chunk := &controlpb.SnapshotChunk{Data: buf[:n]}
			if first {
				chunk.TotalSize, first = size, false
			}
			if err := out.Send(chunk); err != nil {
				_, err = out.CloseAndRecv()
				return err
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return status.Errorf(codes.Internal, "snapshot restore: forward: %v", rerr)
		}
	}
	resp, err := out.CloseAndRecv()
	if err != nil {
		return err
	}
	return in.SendAndClose(resp)
}

// streamSink adapts a gRPC stream to raft.SnapshotSink, sending 256 KiB
// chunks.
type streamSink struct {
	send func([]byte) error
	buf  []byte
}

func (s *streamSink) Write(p []byte) (int, error) {
	s.buf = append(s.buf, p...)
	for len(s.buf) >= 256<<10 {
		if err := s.send(s.buf[:256<<10]); err != nil {
			return 0, err
		}
		s.buf = append(s.buf[:0], s.buf[256<<10:]...)
	}
	return len(p), nil
}

func (s *streamSink) flush() error {
	if len(s.buf) == 0 {
		return nil
	}
	err := s.send(s.buf)
	s.buf = nil
	return err
}

func (s *streamSink) Close() error  { return nil }
func (s *streamSink) ID() string    { return "control-stream" }
func (s *streamSink) Cancel() error { return nil }
