package console

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/pki"
)

//go:embed static
var static embed.FS

// Local is what the console reads and acts through on this node: the
// control server's own handlers, called in-process.
type Local interface {
	Status(context.Context, *controlpb.StatusRequest) (*controlpb.StatusResponse, error)
	SFStats(context.Context, *controlpb.SFStatsRequest) (*controlpb.SFStatsResponse, error)
	SFList(context.Context, *controlpb.SFListRequest) (*controlpb.SFListResponse, error)
	SFRetry(context.Context, *controlpb.SFSelectRequest) (*controlpb.SFSelectResponse, error)
	SFDiscard(context.Context, *controlpb.SFSelectRequest) (*controlpb.SFSelectResponse, error)
	DeployStatus(context.Context, *controlpb.DeployStatusRequest) (*controlpb.DeployStatusResponse, error)
	DeployHistory(context.Context, *controlpb.DeployHistoryRequest) (*controlpb.DeployHistoryResponse, error)
	DeployGet(context.Context, *controlpb.DeployGetRequest) (*controlpb.DeployGetResponse, error)
}

// StatusClient asks a peer for its status over the control API.
type StatusClient interface {
	Status(ctx context.Context, in *controlpb.StatusRequest, opts ...grpc.CallOption) (*controlpb.StatusResponse, error)
}

// AuditReader reads the replicated audit trail from the newest entry back.
type AuditReader interface {
	AuditNewestFirst(fn func(fsm.AuditEntry) bool) error
}

// AlarmLog reads the replicated alarm transitions (fsm's alarm log).
type AlarmLog interface {
	AlarmLogPosition() (last, historyMark uint64, err error)
	AlarmLogAfter(seq uint64, limit int) ([]*fsmpb.AlarmTransition, error)
}

// Member is one configured member of the site.
type Member struct {
	ID      string
	APIAddr string
	Witness bool
}

// Role is what a request may do.
type Role int

const (
	// Nobody may not even read: a TLS listener's request without a site
	// certificate whose role reads.
	Nobody Role = iota
	// Viewer reads.
	Viewer
	// Operator reads and retries or discards parked messages.
	Operator
)

func (r Role) String() string {
	switch r {
	case Operator:
		return "operator"
	case Viewer:
		return "viewer"
	}
	return "nobody"
}

// CertificateRoles is the Authorize of a TLS listener: what the request's
// verified client certificate's role allows, as on the control API
// (viewer reads; operator and admin act; producer, a certificate without
// a role and no certificate read nothing).
func CertificateRoles(r *http.Request) Role {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.PeerCertificates) == 0 {
		return Nobody
	}
	role, err := pki.ClientRole(r.TLS.PeerCertificates[0])
	if err != nil {
		return Nobody
	}
	switch role {
	case pki.RoleViewer:
		return Viewer
	case pki.RoleOperator, pki.RoleAdmin:
		return Operator
	}
	return Nobody
}

// CertificateOrLoopback is CertificateRoles, except that a request
// without a client certificate from this machine may act
// (http.console_loopback_operators, as scadad --dev runs).
func CertificateOrLoopback(r *http.Request) Role {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		if isLoopback(r) {
			return Operator
		}
		return Nobody
	}
	return CertificateRoles(r)
}

// AtMostViewer caps authorize at Viewer (http.console_read_only).
func AtMostViewer(authorize func(*http.Request) Role) func(*http.Request) Role {
	return func(r *http.Request) Role { return min(authorize(r), Viewer) }
}

// LoopbackOperators is the Authorize the daemon uses until the management
// plane has roles: a client on this machine may act, anyone else reads.
func LoopbackOperators(r *http.Request) Role {
	if isLoopback(r) {
		return Operator
	}
	return Viewer
}

func isLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// Options configure a Console.
type Options struct {
	NodeID  string
	Members []Member
	Local   Local
	// Peer returns the control API client of member id.
	Peer  func(id string) (StatusClient, error)
	Audit AuditReader
	// Alarms puts alarm transitions on the timeline (nil: none).
	Alarms AlarmLog
	// Authorize says what a request may do (LoopbackOperators if nil). The
	// management plane's authentication replaces it.
	Authorize func(*http.Request) Role
	Now       func() time.Time
	Log       zerolog.Logger
	// Acting returns ctx naming who acts (for the audit trail of a retry
	// or discard); nil leaves ctx as it is.
	Acting func(ctx context.Context, who string) context.Context
	// Every is how often the site view is refreshed and sampled (1 s if
	// zero); the charts keep Window of samples (15 min if zero).
	Every, Window time.Duration
}

// Console serves the status page and its API.
type Console struct {
	o Options

	mu      sync.Mutex
	view    *SiteView
	samples []Sample // oldest first, at most o.Window/o.Every
	reach   map[string]reachability
	httpURL map[string]string // last known page address per member
	roles   []RoleSpan        // oldest first; each node's newest may be open
}

type reachability struct {
	ok    bool
	since time.Time
}

// New returns a Console; Run keeps its view fresh.
func New(o Options) *Console {
	if o.Authorize == nil {
		o.Authorize = LoopbackOperators
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Every <= 0 {
		o.Every = time.Second
	}
	if o.Window <= 0 {
		o.Window = 15 * time.Minute
	}
	return &Console{o: o, reach: map[string]reachability{}, httpURL: map[string]string{}}
}

// Run refreshes the site view every o.Every until ctx ends.
func (c *Console) Run(ctx context.Context) error {
	t := time.NewTicker(c.o.Every)
	defer t.Stop()
	for {
		c.refresh(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Handler serves GET / (the page), its assets under /ui/ and the API
// under /ui/api/.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	gated := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.o.Authorize(r) == Nobody {
			writeError(w, http.StatusUnauthorized, "the status page needs a client certificate from the site CA with role viewer, operator or admin (scadactl certs issue --client --role viewer)")
			return
		}
		mux.ServeHTTP(w, r)
	})
	assets, _ := fs.Sub(static, "static") // the embedded folder exists
	files := http.FileServerFS(assets)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, assets, "index.html")
	})
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", files))
	mux.HandleFunc("GET /ui/api/site", c.getSite)
	mux.HandleFunc("GET /ui/api/history", c.getHistory)
	mux.HandleFunc("GET /ui/api/timeline", c.getTimeline)
	mux.HandleFunc("GET /ui/api/sf/parked", c.getParked)
	mux.HandleFunc("GET /ui/api/deploy", c.getDeploy)
	mux.HandleFunc("GET /ui/api/deploy/artifact", c.getArtifact)
	mux.HandleFunc("POST /ui/api/sf/retry", c.act("retry"))
	mux.HandleFunc("POST /ui/api/sf/discard", c.act("discard"))
	return gated
}

// NodeView is one member as the serving node sees it.
type NodeView struct {
	ID        string `json:"id"`
	Witness   bool   `json:"witness"`
	Self      bool   `json:"self"`
	Reachable bool   `json:"reachable"`
	// ReachableSince is when Reachable last changed as this node saw it
	// (Unix ms; 0 unknown).
	ReachableSince int64  `json:"reachable_since"`
	LastContactMs  int64  `json:"last_contact_ms"` // -1 unknown
	Error          string `json:"error,omitempty"`
	PageURL        string `json:"page_url,omitempty"`

	Role           string           `json:"role,omitempty"`
	Leader         string           `json:"leader,omitempty"`
	ServiceLevel   uint32           `json:"service_level"`
	Term           uint64           `json:"term"`
	Commit         uint64           `json:"commit"`
	Applied        uint64           `json:"applied"`
	Behind         uint64           `json:"behind"`
	ClusterEpoch   uint64           `json:"cluster_epoch"`
	Version        string           `json:"version,omitempty"`
	BuildRevision  string           `json:"build_revision,omitempty"` // VCS commit of the build
	FeatureLevel   uint32           `json:"feature_level,omitempty"`
	CertNotAfter   int64            `json:"cert_not_after,omitempty"` // Unix s
	CANotAfter     int64            `json:"ca_not_after,omitempty"`
	DeployRevision uint64           `json:"deploy_revision"`
	Connections    []ConnectionView `json:"connections"`
}

// ConnectionView is one field data connection of a node.
type ConnectionView struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Endpoint string `json:"endpoint"`
	Up       bool   `json:"up"`
	Detail   string `json:"detail"`
}

// TargetView is one store-and-forward target.
type TargetView struct {
	Target          string  `json:"target"`
	Pending         uint64  `json:"pending"`
	MaxPending      uint64  `json:"max_pending"` // 0: no cap
	Parked          uint64  `json:"parked"`
	OldestAgeS      float64 `json:"oldest_age_s"`
	DeliveredPerSec float64 `json:"delivered_per_sec"`
	EnqueuedPerSec  float64 `json:"enqueued_per_sec"`
	DeliveredTotal  uint64  `json:"delivered_total"`
	LastError       string  `json:"last_error,omitempty"`
}

// SiteView is the whole page's data.
type SiteView struct {
	ServedBy string       `json:"served_by"`
	At       int64        `json:"at"` // Unix ms
	Nodes    []NodeView   `json:"nodes"`
	Targets  []TargetView `json:"targets"`
	// SFFrom is the node whose buffer figures these are; SFLive says it is
	// the Active (else they are a replica's, rates unknown).
	SFFrom  string `json:"sf_from,omitempty"`
	SFLive  bool   `json:"sf_live"`
	SFError string `json:"sf_error,omitempty"`
	// Role is what the asking request may do (viewer, operator).
	Role string `json:"role"`
}

// Sample is one point of the live charts.
type Sample struct {
	At           int64             `json:"at"` // Unix ms
	ServiceLevel map[string]uint32 `json:"service_level"`
	Role         map[string]string `json:"role"`
	Pending      map[string]uint64 `json:"pending"`
	Delivered    map[string]uint64 `json:"delivered_total"`
	Parked       map[string]uint64 `json:"parked"`
	// Enqueued is each target's estimated enqueue rate (messages/s) at
	// this sample; the page charts it as it is, so the rate has one
	// formula (enqueueRates).
	Enqueued map[string]float64 `json:"enqueued_per_sec,omitempty"`
}

// peerTimeout bounds one peer's Status call: a dead peer must show as
// unreachable within the page's next refresh.
const peerTimeout = 800 * time.Millisecond

// refresh assembles the site view and appends a sample.
func (c *Console) refresh(ctx context.Context) {
	now := c.o.Now()
	v := &SiteView{ServedBy: c.o.NodeID, At: now.UnixMilli()}
	type answer struct {
		st  *controlpb.StatusResponse
		err error
	}
	answers := make([]answer, len(c.o.Members))
	var wg sync.WaitGroup
	for i, m := range c.o.Members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, peerTimeout)
			defer cancel()
			if m.ID == c.o.NodeID {
				answers[i].st, answers[i].err = c.o.Local.Status(sctx, &controlpb.StatusRequest{})
				return
			}
			cl, err := c.o.Peer(m.ID)
			if err == nil {
				answers[i].st, err = cl.Status(sctx, &controlpb.StatusRequest{})
			}
			answers[i].err = err
		}()
	}
	var sf *controlpb.SFStatsResponse
	var sfErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		sctx, cancel := context.WithTimeout(ctx, 2*peerTimeout)
		defer cancel()
		sf, sfErr = c.o.Local.SFStats(sctx, &controlpb.SFStatsRequest{})
	}()
	wg.Wait()

	// What this node's probe says of each peer (reachable, since, contact).
	probe := map[string]*controlpb.MemberStatus{}
	for i, m := range c.o.Members {
		if m.ID == c.o.NodeID && answers[i].st != nil {
			for _, ms := range answers[i].st.Members {
				probe[ms.Id] = ms
			}
		}
	}
	var leaderCommit uint64
	for _, a := range answers {
		if a.st != nil && a.st.CommitIndex > leaderCommit {
			leaderCommit = a.st.CommitIndex
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.o.Members {
		a := answers[i]
		n := NodeView{ID: m.ID, Witness: m.Witness, Self: m.ID == c.o.NodeID, LastContactMs: -1, Reachable: a.err == nil}
		if a.err != nil {
			n.Error = errText(a.err)
		}
		prev, seen := c.reach[m.ID]
		switch {
		case !seen:
			since := now
			if p := probe[m.ID]; p != nil && p.Reachable == n.Reachable && p.ReachableSinceUnixNano != 0 {
				since = time.Unix(0, p.ReachableSinceUnixNano)
			}
			c.reach[m.ID] = reachability{ok: n.Reachable, since: since}
		case prev.ok != n.Reachable:
			c.reach[m.ID] = reachability{ok: n.Reachable, since: now}
		}
		if !n.Self {
			n.ReachableSince = c.reach[m.ID].since.UnixMilli()
		}
		if p := probe[m.ID]; p != nil && p.LastContactUnixNano != 0 {
			n.LastContactMs = now.Sub(time.Unix(0, p.LastContactUnixNano)).Milliseconds()
		}
		if st := a.st; st != nil {
			n.Role, n.Leader, n.ServiceLevel = st.Role, st.LeaderId, st.ServiceLevel
			n.Term, n.Commit, n.Applied, n.ClusterEpoch = st.Term, st.CommitIndex, st.AppliedIndex, st.ClusterEpoch
			if leaderCommit > st.AppliedIndex {
				n.Behind = leaderCommit - st.AppliedIndex
			}
			n.Version, n.CertNotAfter, n.CANotAfter, n.DeployRevision = st.Version, st.CertNotAfterUnix, st.CaNotAfterUnix, st.DeployRevision
			n.BuildRevision, n.FeatureLevel = st.Revision, st.FeatureLevel
			if n.Self {
				n.LastContactMs = st.LastContactMs
			}
			for _, cs := range st.Connections {
				n.Connections = append(n.Connections, ConnectionView{Name: cs.Name, Kind: cs.Kind, Endpoint: cs.Endpoint, Up: cs.Up, Detail: cs.Detail})
			}
			if u := pageURL(st.HttpAddr, m.APIAddr); u != "" {
				c.httpURL[m.ID] = u
			}
		}
		n.PageURL = c.httpURL[m.ID]
		v.Nodes = append(v.Nodes, n)
	}
	if sfErr != nil {
		v.SFError = errText(sfErr)
	} else {
		v.SFFrom, v.SFLive = sf.Node, sf.Live
		for _, t := range sf.Targets {
			tv := TargetView{Target: t.Target, Pending: t.Pending, MaxPending: t.MaxPending, Parked: t.Parked,
				DeliveredPerSec: t.DeliveredPerSec, DeliveredTotal: t.DeliveredTotal, LastError: t.LastError}
			if t.OldestUnixNano > 0 {
				tv.OldestAgeS = now.Sub(time.Unix(0, t.OldestUnixNano)).Seconds()
			}
			v.Targets = append(v.Targets, tv)
		}
		sort.Slice(v.Targets, func(i, j int) bool { return v.Targets[i].Target < v.Targets[j].Target })
	}
	s := Sample{At: v.At, ServiceLevel: map[string]uint32{}, Role: map[string]string{}, Pending: map[string]uint64{}, Delivered: map[string]uint64{}, Parked: map[string]uint64{}, Enqueued: map[string]float64{}}
	for _, n := range v.Nodes {
		if n.Reachable {
			s.ServiceLevel[n.ID], s.Role[n.ID] = n.ServiceLevel, n.Role
		} else {
			s.Role[n.ID] = "unreachable"
		}
	}
	for _, t := range v.Targets {
		s.Pending[t.Target], s.Delivered[t.Target], s.Parked[t.Target] = t.Pending, t.DeliveredTotal, t.Parked
	}
	c.enqueueRates(v, s)
	c.noteRoles(now, s.Role)
	c.samples = append(c.samples, s)
	if keep := int(c.o.Window / c.o.Every); len(c.samples) > keep {
		c.samples = append(c.samples[:0], c.samples[len(c.samples)-keep:]...)
	}
	c.view = v
}

// enqueueRates estimates each target's enqueue rate over the last few
// samples: what arrived is what is held now (pending and parked) plus
// what was delivered, less what was held before. (A discard in the window
// makes it read low; the buffer counts no enqueues per target.) It sets
// the site view's figure and the sample's, which the chart draws.
func (c *Console) enqueueRates(v *SiteView, now Sample) {
	const back = 5
	if len(c.samples) == 0 {
		return
	}
	old := c.samples[max(0, len(c.samples)-back)]
	dt := float64(now.At-old.At) / 1000
	if dt <= 0 {
		return
	}
	for i := range v.Targets {
		t := &v.Targets[i]
		in := float64(now.Pending[t.Target]+now.Parked[t.Target]+now.Delivered[t.Target]) -
			float64(old.Pending[t.Target]+old.Parked[t.Target]+old.Delivered[t.Target])
		if _, had := old.Pending[t.Target]; had {
			t.EnqueuedPerSec = max(0, in) / dt
			now.Enqueued[t.Target] = t.EnqueuedPerSec
		}
	}
}

// RoleSpan is a stretch of time one node held one role (active, standby,
// detached, witness, or unreachable) as this node's console saw it. The
// spans are not replicated: they start when this console started, and the
// replicated leader.elected entries (ActiveSpan) cover what came before.
type RoleSpan struct {
	Node string `json:"node"`
	Role string `json:"role"`
	From int64  `json:"from"` // Unix ms
	To   int64  `json:"to"`
	Open bool   `json:"open"`
}

// Role spans older than roleKeep, or beyond maxRoleSpans (a flapping node),
// are forgotten: the timeline shows at most 48 hours.
const (
	roleKeep     = 48 * time.Hour
	maxRoleSpans = 10000
)

// noteRoles extends each node's open span or, where its role changed,
// closes it and opens a new one. c.mu is held.
func (c *Console) noteRoles(now time.Time, roles map[string]string) {
	ms := now.UnixMilli()
	open := map[string]int{}
	for i, s := range c.roles {
		if s.Open {
			open[s.Node] = i
		}
	}
	ids := make([]string, 0, len(roles))
	for id := range roles {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := roles[id]
		if r == "" {
			r = "unknown"
		}
		if i, ok := open[id]; ok {
			c.roles[i].To = ms
			if c.roles[i].Role == r {
				continue
			}
			c.roles[i].Open = false
		}
		c.roles = append(c.roles, RoleSpan{Node: id, Role: r, From: ms, To: ms, Open: true})
	}
	cut := 0
	for cut < len(c.roles) && (len(c.roles)-cut > maxRoleSpans || (!c.roles[cut].Open && c.roles[cut].To < ms-roleKeep.Milliseconds())) {
		cut++
	}
	if cut > 0 {
		c.roles = append(c.roles[:0], c.roles[cut:]...)
	}
}

// rolesBetween returns the spans that overlap [from, to], cut to it.
func (c *Console) rolesBetween(from, to int64) []RoleSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := []RoleSpan{}
	for _, s := range c.roles {
		if s.To < from || s.From > to {
			continue
		}
		s.From, s.To = max(s.From, from), min(s.To, to)
		out = append(out, s)
	}
	return out
}

// pageURL is the status page's address on a node whose HTTP listener is
// listen: an unspecified host (":8080", "0.0.0.0:8080") takes the host of
// its control API address.
func pageURL(listen, apiAddr string) string {
	if listen == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return ""
	}
	if ip, err := netip.ParseAddr(host); host == "" || (err == nil && ip.IsUnspecified()) {
		if h, _, err := net.SplitHostPort(apiAddr); err == nil {
			host = h
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

func errText(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Code().String() + ": " + s.Message()
	}
	return err.Error()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, map[string]string{"error": fmt.Sprintf(format, args...)})
}

func (c *Console) getSite(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	v := c.view
	c.mu.Unlock()
	if v == nil {
		c.refresh(r.Context())
		c.mu.Lock()
		v = c.view
		c.mu.Unlock()
	}
	out := *v
	out.Role = c.o.Authorize(r).String()
	writeJSON(w, http.StatusOK, out)
}

func (c *Console) getHistory(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	out := append([]Sample(nil), c.samples...)
	c.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"every_ms": c.o.Every.Milliseconds(), "samples": out})
}

// TimelineEvent is one audit entry on the timeline.
type TimelineEvent struct {
	At     int64  `json:"at"` // Unix ms
	Kind   string `json:"kind"`
	Actor  string `json:"actor"`
	Detail string `json:"detail"`
	Seq    uint64 `json:"seq"`
}

// ActiveSpan is a stretch of time one node was Active, from leader.elected
// entries.
type ActiveSpan struct {
	Node string `json:"node"`
	From int64  `json:"from"`
	To   int64  `json:"to"`
	// Open says the span lasts until now (no later leader.elected).
	Open bool `json:"open"`
}

// timelineScan bounds the audit entries one timeline request reads.
const timelineScan = 20000

func (c *Console) getTimeline(w http.ResponseWriter, r *http.Request) {
	hours := 3.0
	if h := r.URL.Query().Get("hours"); h != "" {
		v, err := strconv.ParseFloat(h, 64)
		if err != nil || v <= 0 || v > 48 {
			writeError(w, http.StatusBadRequest, "hours %q: want a number of hours above 0 and at most 48", h)
			return
		}
		hours = v
	}
	now := c.o.Now()
	from := now.Add(-time.Duration(hours * float64(time.Hour)))
	var events []TimelineEvent
	var elected []fsm.AuditEntry // newest first, down to the one before from
	n := 0
	err := c.o.Audit.AuditNewestFirst(func(e fsm.AuditEntry) bool {
		n++
		if e.Kind == "leader.elected" {
			elected = append(elected, e)
		}
		if e.At.Before(from) {
			return e.Kind != "leader.elected" && n < timelineScan
		}
		events = append(events, TimelineEvent{At: e.At.UnixMilli(), Kind: e.Kind, Actor: e.Actor, Detail: e.Detail, Seq: e.Seq})
		return n < timelineScan
	})
	if err != nil {
		writeError(w, http.StatusInternalServerError, "read the audit trail: %v", err)
		return
	}
	alarms, err := c.alarmEvents(from)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "read the alarm log: %v", err)
		return
	}
	events = append(events, alarms...)
	sort.SliceStable(events, func(i, j int) bool {
		if events[i].At != events[j].At {
			return events[i].At < events[j].At
		}
		return events[i].Seq < events[j].Seq
	})
	var spans []ActiveSpan
	for i := len(elected) - 1; i >= 0; i-- {
		e := elected[i]
		s := ActiveSpan{Node: e.Actor, From: max(e.At.UnixMilli(), from.UnixMilli()), To: now.UnixMilli(), Open: i == 0}
		if i > 0 {
			s.To = elected[i-1].At.UnixMilli()
		}
		if s.To > s.From {
			spans = append(spans, s)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"from": from.UnixMilli(), "to": now.UnixMilli(), "events": events, "active": spans,
		"roles": c.rolesBetween(from.UnixMilli(), now.UnixMilli())})
}

// timelineAlarms bounds the alarm transitions one timeline request reads
// (the newest of them).
const timelineAlarms = 5000

// alarmEvents are the alarm transitions since from, as timeline events of
// kind "alarm.<transition>" by the alarm's source.
func (c *Console) alarmEvents(from time.Time) ([]TimelineEvent, error) {
	if c.o.Alarms == nil {
		return nil, nil
	}
	last, _, err := c.o.Alarms.AlarmLogPosition()
	if err != nil || last == 0 {
		return nil, err
	}
	ts, err := c.o.Alarms.AlarmLogAfter(last-min(last, timelineAlarms), timelineAlarms)
	if err != nil {
		return nil, err
	}
	var out []TimelineEvent
	for _, t := range ts {
		at := time.Unix(0, t.StampUnixNano)
		if at.Before(from) {
			continue
		}
		st := t.GetState()
		detail := fmt.Sprintf("%s %s (severity %d): %s", st.GetAlarmId(), st.GetConditionName(), st.GetSeverity(), st.GetMessage())
		if t.Operator != "" {
			detail += " — by " + t.Operator
		}
		if t.Comment != "" {
			detail += ": " + t.Comment
		}
		out = append(out, TimelineEvent{At: at.UnixMilli(), Kind: "alarm." + t.Kind, Actor: st.GetSource(), Detail: detail})
	}
	return out, nil
}

func (c *Console) getParked(w http.ResponseWriter, r *http.Request) {
	limit := 200
	resp, err := c.o.Local.SFList(r.Context(), &controlpb.SFListRequest{Target: r.URL.Query().Get("target"), Parked: true, Limit: int32(limit)})
	if err != nil {
		writeError(w, http.StatusBadGateway, "list parked messages: %s", errText(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"messages": resp.Messages, "limit": limit})
}

func (c *Console) getDeploy(w http.ResponseWriter, r *http.Request) {
	st, err := c.o.Local.DeployStatus(r.Context(), &controlpb.DeployStatusRequest{})
	if err != nil {
		writeError(w, http.StatusBadGateway, "deploy status: %s", errText(err))
		return
	}
	h, err := c.o.Local.DeployHistory(r.Context(), &controlpb.DeployHistoryRequest{})
	if err != nil {
		writeError(w, http.StatusBadGateway, "deploy history: %s", errText(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": st, "history": h})
}

func (c *Console) getArtifact(w http.ResponseWriter, r *http.Request) {
	rev, err := strconv.ParseUint(r.URL.Query().Get("revision"), 10, 64)
	if err != nil || rev == 0 {
		writeError(w, http.StatusBadRequest, "revision %q: want a revision number above 0", r.URL.Query().Get("revision"))
		return
	}
	a, err := c.o.Local.DeployGet(r.Context(), &controlpb.DeployGetRequest{Revision: rev})
	if err != nil {
		writeError(w, http.StatusNotFound, "revision %d: %s", rev, errText(err))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(a.Artifact)
}

// maxActionBody bounds an action's request body.
const maxActionBody = 64 << 10

// act serves an operator's retry or discard of parked messages.
func (c *Console) act(what string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c.o.Authorize(r) != Operator {
			writeError(w, http.StatusForbidden, "%s parked messages: operators only (this request may only read)", what)
			return
		}
		// A JSON body cannot come from another site's form without the
		// browser asking first; an Origin, when sent, must be this page's.
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			writeError(w, http.StatusUnsupportedMediaType, "%s parked messages: the body must be JSON (Content-Type application/json), not %q", what, ct)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
			writeError(w, http.StatusForbidden, "%s parked messages: request from another site's page (Origin %s)", what, o)
			return
		}
		var req struct {
			IDs    []string `json:"ids"`
			Target string   `json:"target"`
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxActionBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "%s parked messages: read the request: %v", what, err)
			return
		}
		if len(req.IDs) == 0 && req.Target == "" {
			writeError(w, http.StatusBadRequest, "%s parked messages: name the messages (ids) or a target (all its parked messages)", what)
			return
		}
		sel := &controlpb.SFSelectRequest{Ids: req.IDs, AllOfTarget: req.Target}
		ctx := r.Context()
		if c.o.Acting != nil {
			ctx = c.o.Acting(ctx, caller(r, c.o.NodeID))
		}
		var resp *controlpb.SFSelectResponse
		var err error
		if what == "retry" {
			resp, err = c.o.Local.SFRetry(ctx, sel)
		} else {
			resp, err = c.o.Local.SFDiscard(ctx, sel)
		}
		if err != nil {
			code := http.StatusBadGateway
			switch status.Code(err) {
			case codes.NotFound:
				code = http.StatusNotFound
			case codes.InvalidArgument, codes.FailedPrecondition:
				code = http.StatusBadRequest
			}
			writeError(w, code, "%s parked messages: %s", what, errText(err))
			return
		}
		c.o.Log.Info().Str("action", what).Strs("ids", req.IDs).Str("target", req.Target).Str("from", r.RemoteAddr).Int32("affected", resp.Affected).Msg("status page action")
		writeJSON(w, http.StatusOK, map[string]any{"affected": resp.Affected})
	}
}

// caller names who sent r for the audit trail: its certificate's name
// ("alice via status page of node-b"), or where it came from on a listener
// without certificates ("status page of node-b from 127.0.0.1:51234").
func caller(r *http.Request, node string) string {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.PeerCertificates) > 0 {
		return r.TLS.PeerCertificates[0].Subject.CommonName + " via status page of " + node
	}
	return "status page of " + node + " from " + r.RemoteAddr
}
