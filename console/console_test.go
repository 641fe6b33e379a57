package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
)

// fakeLocal answers as a node's control server would, and records
// retries.
type fakeLocal struct {
	st      *controlpb.StatusResponse
	targets []*controlpb.SFTargetStats
	retried []string
}

func (f *fakeLocal) Status(context.Context, *controlpb.StatusRequest) (*controlpb.StatusResponse, error) {
	return f.st, nil
}
func (f *fakeLocal) SFStats(context.Context, *controlpb.SFStatsRequest) (*controlpb.SFStatsResponse, error) {
	return &controlpb.SFStatsResponse{Targets: f.targets, Node: f.st.NodeId, Live: true}, nil
}
func (f *fakeLocal) SFList(context.Context, *controlpb.SFListRequest) (*controlpb.SFListResponse, error) {
	return &controlpb.SFListResponse{}, nil
}
func (f *fakeLocal) SFRetry(_ context.Context, r *controlpb.SFSelectRequest) (*controlpb.SFSelectResponse, error) {
	f.retried = append(f.retried, r.Ids...)
	return &controlpb.SFSelectResponse{Affected: int32(len(r.Ids))}, nil
}
func (f *fakeLocal) SFDiscard(context.Context, *controlpb.SFSelectRequest) (*controlpb.SFSelectResponse, error) {
	return nil, status.Error(codes.NotFound, "no such parked message")
}
func (f *fakeLocal) DeployStatus(context.Context, *controlpb.DeployStatusRequest) (*controlpb.DeployStatusResponse, error) {
	return &controlpb.DeployStatusResponse{}, nil
}
func (f *fakeLocal) DeployHistory(context.Context, *controlpb.DeployHistoryRequest) (*controlpb.DeployHistoryResponse, error) {
	return &controlpb.DeployHistoryResponse{}, nil
}
func (f *fakeLocal) DeployGet(context.Context, *controlpb.DeployGetRequest) (*controlpb.DeployGetResponse, error) {
	return &controlpb.DeployGetResponse{Artifact: []byte("version: 1\n")}, nil
}

type deadPeer struct{}

func (deadPeer) Status(context.Context, *controlpb.StatusRequest, ...grpc.CallOption) (*controlpb.StatusResponse, error) {
	return nil, status.Error(codes.Unavailable, "connection refused")
}

type trail []fsm.AuditEntry

func (t trail) AuditNewestFirst(fn func(fsm.AuditEntry) bool) error {
	for i := len(t) - 1; i >= 0; i-- {
		if !fn(t[i]) {
			return nil
		}
	}
	return nil
}

func newTestConsole(t *testing.T, now time.Time, audit trail, authorize func(*http.Request) Role) (*Console, *fakeLocal) {
	t.Helper()
	local := &fakeLocal{
		st: &controlpb.StatusResponse{NodeId: "node-b", Role: "active", LeaderId: "node-b", CommitIndex: 10, AppliedIndex: 10, ServiceLevel: 250, HttpAddr: ":8080",
			Members: []*controlpb.MemberStatus{{Id: "node-a", Reachable: false, ReachableSinceUnixNano: now.Add(-time.Minute).UnixNano()}, {Id: "node-b", Reachable: true}}},
		targets: []*controlpb.SFTargetStats{{Target: "hist", Pending: 3, MaxPending: 10, Parked: 1}},
	}
	c := New(Options{
		NodeID:  "node-b",
		Members: []Member{{ID: "node-a", APIAddr: "10.0.0.1:7300"}, {ID: "node-b", APIAddr: "10.0.0.2:7300"}},
		Local:   local,
		Peer: func(id string) (StatusClient, error) {
			if id == "node-a" {
				return deadPeer{}, nil
			}
			return nil, errors.New("unknown peer")
		},
		Audit: audit, Authorize: authorize, Now: func() time.Time { return now }, Log: zerolog.Nop(),
	})
	c.refresh(context.Background())
	return c, local
}

func TestSiteViewMarksADeadPeerUnreachableSinceTheProbeSaidSo(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c, _ := newTestConsole(t, now, nil, nil)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/ui/api/site", nil)
	req.RemoteAddr = "192.0.2.7:5000"
	c.Handler().ServeHTTP(rec, req)
	var v SiteView
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("site view: %v (%s)", err, rec.Body)
	}
	if len(v.Nodes) != 2 || v.Role != "viewer" {
		t.Fatalf("view %+v, want two nodes and a viewer (not loopback)", v)
	}
	a, b := v.Nodes[0], v.Nodes[1]
	if a.Reachable || a.ReachableSince != now.Add(-time.Minute).UnixMilli() || !strings.Contains(a.Error, "connection refused") {
		t.Errorf("dead peer %+v, want unreachable since the probe's time with the error", a)
	}
	if !b.Reachable || !b.Self || b.Role != "active" || b.ServiceLevel != 250 || b.PageURL != "http://10.0.0.2:8080" {
		t.Errorf("self %+v, want reachable Active at 250 with its page on its API host", b)
	}
	if len(v.Targets) != 1 || v.Targets[0].Pending != 3 || v.Targets[0].MaxPending != 10 || !v.SFLive {
		t.Errorf("targets %+v", v.Targets)
	}
}

func TestPageURL(t *testing.T) {
	for _, c := range []struct{ listen, api, want string }{
		{"127.0.0.1:8080", "127.0.0.1:7300", "http://127.0.0.1:8080"},
		{":8080", "10.1.2.3:7300", "http://10.1.2.3:8080"},
		{"0.0.0.0:8080", "plc-a.site:7300", "http://plc-a.site:8080"},
		{"[::]:8080", "[fd00::1]:7300", "http://[fd00::1]:8080"},
		{"", "10.1.2.3:7300", ""},
	} {
		if got := pageURL(c.listen, c.api); got != c.want {
			t.Errorf("pageURL(%q, %q) = %q, want %q", c.listen, c.api, got, c.want)
		}
	}
}

func TestActionsNeedAnOperatorJSONAndThisOrigin(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c, local := newTestConsole(t, now, nil, nil)
	h := c.Handler()
	post := func(remote, ct, origin, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "http://node-b:8080/ui/api/sf/retry", strings.NewReader(body))
		req.RemoteAddr = remote
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	cases := []struct {
		name, remote, ct, origin, body string
		want                           int
	}{
		{"viewer", "192.0.2.7:5000", "application/json", "", `{"ids":["m1"]}`, http.StatusForbidden},
		{"form post", "127.0.0.1:5000", "application/x-www-form-urlencoded", "", `ids=m1`, http.StatusUnsupportedMediaType},
		{"other site", "127.0.0.1:5000", "application/json", "http://evil.example", `{"ids":["m1"]}`, http.StatusForbidden},
		{"nothing named", "127.0.0.1:5000", "application/json", "", `{}`, http.StatusBadRequest},
		{"unknown field", "127.0.0.1:5000", "application/json", "", `{"idz":["m1"]}`, http.StatusBadRequest},
		{"operator", "127.0.0.1:5000", "application/json", "http://node-b:8080", `{"ids":["m1"]}`, http.StatusOK},
	}
	for _, tc := range cases {
		rec := post(tc.remote, tc.ct, tc.origin, tc.body)
		if rec.Code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, rec.Code, rec.Body, tc.want)
		}
	}
	if len(local.retried) != 1 || local.retried[0] != "m1" {
		t.Fatalf("retried %v, want only the operator's m1", local.retried)
	}
	// A read-only console refuses even loopback.
	ro, local2 := newTestConsole(t, now, nil, AtMostViewer(LoopbackOperators))
	req := httptest.NewRequest(http.MethodPost, "/ui/api/sf/retry", strings.NewReader(`{"ids":["m1"]}`))
	req.RemoteAddr, req.Header["Content-Type"] = "127.0.0.1:5000", []string{"application/json"}
	rec := httptest.NewRecorder()
	ro.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden || len(local2.retried) != 0 {
		t.Fatalf("read-only console: %d, retried %v", rec.Code, local2.retried)
	}
}

func TestTimelineSpansFollowLeaderElectedEntries(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	at := func(ago time.Duration) time.Time { return now.Add(-ago) }
	audit := trail{
		{Seq: 1, At: at(5 * time.Hour), Kind: "leader.elected", Actor: "node-a"},
		{Seq: 2, At: at(2 * time.Hour), Kind: "deploy", Actor: "operator"},
		{Seq: 3, At: at(time.Hour), Kind: "leader.elected", Actor: "node-b"},
		{Seq: 4, At: at(time.Minute), Kind: "failover", Actor: "operator"},
	}
	c, _ := newTestConsole(t, now, audit, nil)
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/api/timeline?hours=3", nil))
	var tl struct {
		From   int64           `json:"from"`
		Events []TimelineEvent `json:"events"`
		Active []ActiveSpan    `json:"active"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &tl); err != nil {
		t.Fatal(err)
	}
	if len(tl.Events) != 3 || tl.Events[0].Seq != 2 || tl.Events[2].Seq != 4 {
		t.Errorf("events %+v, want seq 2..4 (seq 1 is before the window)", tl.Events)
	}
	want := []ActiveSpan{
		{Node: "node-a", From: at(3 * time.Hour).UnixMilli(), To: at(time.Hour).UnixMilli()},
		{Node: "node-b", From: at(time.Hour).UnixMilli(), To: now.UnixMilli(), Open: true},
	}
	if len(tl.Active) != 2 || tl.Active[0] != want[0] || tl.Active[1] != want[1] {
		t.Errorf("spans %+v, want %+v", tl.Active, want)
	}
	rec = httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/api/timeline?hours=-1", nil))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "hours") {
		t.Errorf("bad hours: %d %s", rec.Code, rec.Body)
	}
}

func TestThePageAndItsAssetsAreServed(t *testing.T) {
	c, _ := newTestConsole(t, time.Now(), nil, nil)
	for path, want := range map[string]string{"/": "<title>scadad site</title>", "/ui/static/app.js": "moveToPeer", "/ui/static/app.css": ".panel"} {
		rec := httptest.NewRecorder()
		c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("GET %s: %d, body without %q", path, rec.Code, want)
		}
	}
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/nothing", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /nothing: %d, want 404", rec.Code)
	}
}

// livePeer answers Status with whatever st holds, or err.
type livePeer struct {
	st  *controlpb.StatusResponse
	err error
}

func (p *livePeer) Status(context.Context, *controlpb.StatusRequest, ...grpc.CallOption) (*controlpb.StatusResponse, error) {
	return p.st, p.err
}

// The timeline's role lanes come from what the console saw: a peer that
// was unreachable, came back as Standby and took over shows three spans,
// and this node's own Active span ends when it became Standby.
func TestTimelineRoleSpansFollowWhatTheConsoleSaw(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	peer := &livePeer{err: status.Error(codes.Unavailable, "connection refused")}
	local := &fakeLocal{st: &controlpb.StatusResponse{NodeId: "node-b", Role: "active", ServiceLevel: 250}}
	c := New(Options{
		NodeID:  "node-b",
		Members: []Member{{ID: "node-a"}, {ID: "node-b"}},
		Local:   local,
		Peer:    func(string) (StatusClient, error) { return peer, nil },
		Audit:   trail{}, Now: func() time.Time { return now }, Log: zerolog.Nop(),
	})
	step := func(d time.Duration) { now = now.Add(d); c.refresh(context.Background()) }
	start := now
	c.refresh(context.Background())
	step(10 * time.Second)
	peer.st, peer.err = &controlpb.StatusResponse{NodeId: "node-a", Role: "standby", ServiceLevel: 200}, nil
	step(10 * time.Second)
	step(10 * time.Second)
	peer.st = &controlpb.StatusResponse{NodeId: "node-a", Role: "active", ServiceLevel: 250}
	local.st = &controlpb.StatusResponse{NodeId: "node-b", Role: "standby", ServiceLevel: 200}
	step(10 * time.Second)

	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/api/timeline?hours=1", nil))
	var tl struct {
		Roles []RoleSpan `json:"roles"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &tl); err != nil {
		t.Fatalf("timeline: %v (%s)", err, rec.Body)
	}
	ms := func(d time.Duration) int64 { return start.Add(d).UnixMilli() }
	want := map[string][]RoleSpan{
		"node-a": {
			{Node: "node-a", Role: "unreachable", From: ms(0), To: ms(20 * time.Second)},
			{Node: "node-a", Role: "standby", From: ms(20 * time.Second), To: ms(40 * time.Second)},
			{Node: "node-a", Role: "active", From: ms(40 * time.Second), To: ms(40 * time.Second), Open: true},
		},
		"node-b": {
			{Node: "node-b", Role: "active", From: ms(0), To: ms(40 * time.Second)},
			{Node: "node-b", Role: "standby", From: ms(40 * time.Second), To: ms(40 * time.Second), Open: true},
		},
	}
	got := map[string][]RoleSpan{}
	for _, s := range tl.Roles {
		got[s.Node] = append(got[s.Node], s)
	}
	for node, w := range want {
		if len(got[node]) != len(w) {
			t.Errorf("%s spans %+v, want %+v", node, got[node], w)
			continue
		}
		for i := range w {
			if got[node][i] != w[i] {
				t.Errorf("%s span %d: %+v, want %+v", node, i, got[node][i], w[i])
			}
		}
	}
}

// A node that flaps for ever does not grow the console's memory.
func TestRoleSpansAreBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c := New(Options{NodeID: "node-b", Now: func() time.Time { return now }, Log: zerolog.Nop()})
	for i := range maxRoleSpans + 500 {
		now = now.Add(time.Second)
		role := "standby"
		if i%2 == 0 {
			role = "unreachable"
		}
		c.mu.Lock()
		c.noteRoles(now, map[string]string{"node-a": role})
		c.mu.Unlock()
	}
	if len(c.roles) > maxRoleSpans {
		t.Errorf("%d role spans kept, want at most %d", len(c.roles), maxRoleSpans)
	}
	if last := c.roles[len(c.roles)-1]; !last.Open || last.To != now.UnixMilli() {
		t.Errorf("newest span %+v, want open until now", last)
	}
}

// With console_loopback_operators a browser on the node's machine acts
// without a certificate; from elsewhere it still needs one.
func TestCertificateOrLoopback(t *testing.T) {
	for _, tc := range []struct {
		remote string
		want   Role
	}{{"127.0.0.1:5000", Operator}, {"[::1]:5000", Operator}, {"192.0.2.7:5000", Nobody}, {"garbage", Nobody}} {
		req := httptest.NewRequest(http.MethodGet, "https://node-b/", nil)
		req.RemoteAddr = tc.remote
		if got := CertificateOrLoopback(req); got != tc.want {
			t.Errorf("no certificate from %s: %v, want %v", tc.remote, got, tc.want)
		}
	}
}

// alarmLog is a replicated alarm log of transitions, oldest first.
type alarmLog []*fsmpb.AlarmTransition

func (l alarmLog) AlarmLogPosition() (uint64, uint64, error) {
	if len(l) == 0 {
		return 0, 0, nil
	}
	return l[len(l)-1].LogSeq, 0, nil
}

func (l alarmLog) AlarmLogAfter(seq uint64, limit int) ([]*fsmpb.AlarmTransition, error) {
	var out []*fsmpb.AlarmTransition
	for _, t := range l {
		if t.LogSeq > seq && len(out) < limit {
			out = append(out, t)
		}
	}
	return out, nil
}

// Alarm transitions in the window are on the timeline, in time order
// among the audit entries, named by their source.
func TestTimelineShowsAlarmTransitions(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	at := func(ago time.Duration) int64 { return now.Add(-ago).UnixNano() }
	hiHi := &fsmpb.AlarmRecord{AlarmId: "Pump1.Speed.HiHi", Source: "Pump1.Speed", ConditionName: "HiHi", Severity: 900, Message: "speed very high"}
	c, _ := newTestConsole(t, now, trail{
		{Seq: 1, At: now.Add(-30 * time.Minute), Kind: "deploy", Actor: "operator"},
	}, nil)
	c.o.Alarms = alarmLog{
		{LogSeq: 1, Kind: "raised", StampUnixNano: at(5 * time.Hour), State: hiHi}, // before the window
		{LogSeq: 2, Kind: "raised", StampUnixNano: at(time.Hour), State: hiHi},
		{LogSeq: 3, Kind: "acknowledged", StampUnixNano: at(10 * time.Minute), Operator: "shiftlead", Comment: "on it", State: hiHi},
	}
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/api/timeline?hours=3", nil))
	var tl struct {
		Events []TimelineEvent `json:"events"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &tl); err != nil {
		t.Fatalf("timeline: %v (%s)", err, rec.Body)
	}
	var kinds []string
	for _, e := range tl.Events {
		kinds = append(kinds, e.Kind+" "+e.Actor)
	}
	want := []string{"alarm.raised Pump1.Speed", "deploy operator", "alarm.acknowledged Pump1.Speed"}
	if strings.Join(kinds, ", ") != strings.Join(want, ", ") {
		t.Fatalf("timeline events %q, want %q", kinds, want)
	}
	if d := tl.Events[2].Detail; !strings.Contains(d, "HiHi") || !strings.Contains(d, "shiftlead") || !strings.Contains(d, "on it") {
		t.Errorf("acknowledgement detail %q, want the condition, who and the comment", d)
	}
}

// The enqueue rate has one formula: the chart (the history's samples)
// and the targets table (the site view) carry the same figure.
func TestEnqueueRateIsOneFigureForTheTableAndTheChart(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c, local := newTestConsole(t, now, nil, nil)
	c.o.Now = func() time.Time { return now }
	// Two seconds later: 10 more pending and 20 delivered, so 30 arrived.
	now = now.Add(2 * time.Second)
	local.targets = []*controlpb.SFTargetStats{{Target: "hist", Pending: 13, MaxPending: 10, Parked: 1, DeliveredTotal: 20}}
	c.refresh(context.Background())

	get := func(path string, into any) {
		t.Helper()
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr = "192.0.2.7:5000"
		c.Handler().ServeHTTP(rec, req)
		if err := json.Unmarshal(rec.Body.Bytes(), into); err != nil {
			t.Fatalf("%s: %v (%s)", path, err, rec.Body)
		}
	}
	var v SiteView
	get("/ui/api/site", &v)
	var h struct {
		Samples []Sample `json:"samples"`
	}
	get("/ui/api/history", &h)
	if len(v.Targets) != 1 || v.Targets[0].EnqueuedPerSec != 15 {
		t.Fatalf("site view targets %+v, want hist at 15/s (30 arrived in 2 s)", v.Targets)
	}
	if len(h.Samples) != 2 {
		t.Fatalf("history has %d samples, want 2", len(h.Samples))
	}
	if _, first := h.Samples[0].Enqueued["hist"]; first {
		t.Errorf("the first sample has a rate %v, want none (nothing to compare with)", h.Samples[0].Enqueued)
	}
	if got := h.Samples[1].Enqueued["hist"]; got != v.Targets[0].EnqueuedPerSec {
		t.Errorf("chart's sample says %v/s, the table %v/s: want one figure", got, v.Targets[0].EnqueuedPerSec)
	}
}
