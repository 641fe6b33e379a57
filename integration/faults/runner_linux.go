//go:build linux

package faults

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/heal"
	"github.com/scadad/scadad/internal/testcluster"
)

// suiteConfig is one run of the suite.
type suiteConfig struct {
	Mode           string
	Voters         int
	Witness        bool
	OverrideAfter  time.Duration
	Rounds         int
	Seed           uint64
	Dir            string // scratch: cluster, sink record
	ClientsPerNode int
	CASClients     int
	// Extra is YAML merged over every node's config (testcluster.Options.Extra).
	Extra string
}

// runner drives one cluster through a schedule and records the history.
type runner struct {
	cfg  suiteConfig
	bin  *testcluster.Binaries
	net  network
	c    *testcluster.Cluster
	sink *testcluster.Sink
	logf func(format string, args ...any)
	http *http.Client

	latencyMS atomic.Int64

	mu      sync.Mutex
	enq     []enqueueOp
	cas     []casOp
	samples []roleSample
	events  []faultEvent
	last    map[string]roleSample
	cut     []link
	loss    float64
	splitAt time.Time // pair mode: when the over-override partition began
}

func newRunner(cfg suiteConfig, bin *testcluster.Binaries, nw network, logf func(string, ...any)) *runner {
	r := &runner{cfg: cfg, bin: bin, net: nw, logf: logf, last: map[string]roleSample{}}
	tr := &http.Transport{
		DialContext:         r.dial,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     2 * time.Second,
	}
	r.http = &http.Client{Transport: tr}
	return r
}

// dial opens client connections from the clients' host, slowed by the
// current latency fault.
func (r *runner) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := r.net.Dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &slowConn{Conn: c, delay: &r.latencyMS}, nil
}

// slowConn delays each write by the latency in force: a userspace
// latency fault on the client paths (this kernel has no netem).
type slowConn struct {
	net.Conn
	delay *atomic.Int64
}

func (c *slowConn) Write(p []byte) (int, error) {
	if ms := c.delay.Load(); ms > 0 {
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
	return c.Conn.Write(p)
}

// ---- cluster and sink ----

func (r *runner) start(ctx context.Context) error {
	opts := testcluster.Options{
		Mode: r.cfg.Mode, Voters: r.cfg.Voters, Witness: r.cfg.Witness,
		OverrideAfter: r.cfg.OverrideAfter, Dir: filepath.Join(r.cfg.Dir, "cluster"), LogLevel: "info",
		Wrap: r.net.Wrap, Extra: r.cfg.Extra,
	}
	if r.net.Host("node-a") != "" {
		opts.Host = r.net.Host
	}
	c, err := testcluster.New(r.bin, opts)
	if err != nil {
		return fmt.Errorf("make cluster: %w", err)
	}
	r.c = c
	if r.sink, err = startSink(r.bin, r.net, r.cfg.Dir); err != nil {
		return err
	}
	if err := c.StartAll(); err != nil {
		return fmt.Errorf("start nodes: %w", err)
	}
	go r.sampleRoles(ctx)
	if _, err := r.waitOneActive(ctx, 30*time.Second); err != nil {
		return err
	}
	site := testcluster.SiteConfig("faults-initial", map[string]string{"sink": r.sink.URL}, 1000000)
	push, _, err := r.push(ctx, site, -1)
	if err != nil {
		return fmt.Errorf("initial deploy: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st controlpb.DeployStatusResponse
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.ctlJSON(sctx, nil, &st, "deploy", "status")
		cancel()
		applied := 0
		for _, n := range st.Nodes {
			if n.Revision == push.Revision && n.Ok {
				applied++
			}
		}
		if err == nil && applied == len(r.c.Nodes) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("initial deploy: revision %d applied on %d of %d nodes after 30s (%v)", push.Revision, applied, len(r.c.Nodes), err)
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

func (r *runner) close() {
	if r.c != nil {
		r.c.Close()
	}
	if r.sink != nil {
		r.sink.Close()
	}
}

// sinkProc is an sfsink running on the sink host.
// startSink runs the recording sink on the sink's own host.
func startSink(bin *testcluster.Binaries, nw network, dir string) (*testcluster.Sink, error) {
	listen := "127.0.0.1:0"
	if h := nw.Host(hostSink); h != "" {
		listen = h + ":8080"
	}
	return testcluster.StartSinkOn(bin, dir, listen, func(argv []string) []string { return nw.Wrap(hostSink, argv) })
}

// deliveries reads the sink's whole record (failed requests too; the
// checker looks at their status).
func deliveries(s *testcluster.Sink) ([]delivery, error) {
	f, err := os.Open(s.Record)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	defer f.Close()
	var out []delivery
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var d delivery
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			continue // a line being written right now
		}
		out = append(out, d)
	}
	return out, sc.Err()
}

// ---- scadactl from the clients' host ----

// ctl runs scadactl against nodes (all running nodes when nil).
func (r *runner) ctl(ctx context.Context, nodes []*testcluster.Node, args ...string) (string, string, int, error) {
	if nodes == nil {
		for _, n := range r.c.Nodes {
			if n.Running() {
				nodes = append(nodes, n)
			}
		}
	}
	var eps []string
	for _, n := range nodes {
		eps = append(eps, n.APIAddr)
	}
	full := append([]string{r.bin.Scadactl, "--endpoints", strings.Join(eps, ","), "--certs", r.c.Certs, "--timeout", "2s"}, args...)
	argv := r.net.Wrap(hostClient, full)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errb.String(), ee.ExitCode(), nil
	}
	if err != nil {
		return "", "", -1, fmt.Errorf("run scadactl: %w", err)
	}
	return out.String(), errb.String(), 0, nil
}

func (r *runner) ctlJSON(ctx context.Context, nodes []*testcluster.Node, v any, args ...string) error {
	out, errs, code, err := r.ctl(ctx, nodes, append([]string{"--output", "json"}, args...)...)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("scadactl %v: exit %d: %s", args, code, strings.TrimSpace(errs))
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("scadactl %v: decode %q: %w", args, out, err)
	}
	return nil
}

// supersededDeploys reads the audit for the deploys a heal recorded as
// made on the losing side of a split (never applied) and returns their
// content hashes.
func (r *runner) supersededDeploys(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	var after uint64
	for {
		var page []*controlpb.AuditEntry
		if err := r.ctlJSON(ctx, nil, &page, "audit", "--after", strconv.FormatUint(after, 10), "--limit", "1000"); err != nil {
			return nil, err
		}
		if len(page) == 0 {
			return out, nil
		}
		for _, e := range page {
			after = e.Seq
			if e.Kind != heal.KindDeploySuperseded {
				continue
			}
			if _, rest, ok := strings.Cut(e.Detail, "sha256 "); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					out[f[0]] = true
				}
			}
		}
	}
}

// pushReply is the part of scadactl's deploy push reply the suite reads.
type pushReply struct {
	Revision uint64 `json:"revision"`
	Sha256   string `json:"sha256"`
	Noop     bool   `json:"noop"`
}

// push deploys site with --expect-revision expect (none when < 0) and
// classifies the outcome.
func (r *runner) push(ctx context.Context, site []byte, expect int64) (pushReply, string, error) {
	var resp pushReply
	file, err := os.CreateTemp(r.cfg.Dir, "site-*.yaml")
	if err != nil {
		return resp, outcomeUnknown, err
	}
	defer os.Remove(file.Name())
	if _, err := file.Write(site); err != nil {
		file.Close()
		return resp, outcomeUnknown, err
	}
	file.Close()
	args := []string{"--output", "json", "deploy", "push", file.Name()}
	if expect >= 0 {
		args = append(args, "--expect-revision", fmt.Sprint(expect))
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, errs, code, err := r.ctl(ctx, nil, args...)
	switch {
	case err != nil:
		return resp, outcomeUnknown, err
	case code == 0:
		if err := json.Unmarshal([]byte(out), &resp); err != nil {
			return resp, outcomeUnknown, fmt.Errorf("decode push reply %q: %w", out, err)
		}
		return resp, outcomeOK, nil
	case code == 4 && strings.Contains(errs, "is at revision"):
		return resp, outcomeMismatch, nil
	default:
		return resp, outcomeUnknown, fmt.Errorf("exit %d: %s", code, strings.TrimSpace(errs))
	}
}

// ---- role samples ----

type healthReply struct {
	Active bool   `json:"active"`
	Role   string `json:"role"`
	Epoch  string `json:"epoch"`
}

func (r *runner) health(ctx context.Context, n *testcluster.Node) roleSample {
	s := roleSample{Node: n.ID, Send: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.HTTPAddr+"/health/active", nil)
	resp, err := r.http.Do(req)
	if err == nil {
		var h healthReply
		if json.NewDecoder(resp.Body).Decode(&h) == nil {
			s.OK, s.Role, s.Epoch = true, h.Role, h.Epoch
		}
		resp.Body.Close()
	}
	s.Recv = time.Now()
	return s
}

// sampleRoles asks every node for its role every 100 ms until ctx ends.
func (r *runner) sampleRoles(ctx context.Context) {
	var wg sync.WaitGroup
	for _, n := range r.c.Nodes {
		wg.Add(1)
		go func(n *testcluster.Node) {
			defer wg.Done()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				s := r.health(ctx, n)
				if ctx.Err() != nil {
					return
				}
				r.mu.Lock()
				r.samples = append(r.samples, s)
				r.last[n.ID] = s
				r.mu.Unlock()
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}(n)
	}
	wg.Wait()
}

// roles returns the latest sample of every node.
func (r *runner) roles() map[string]roleSample {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]roleSample, len(r.last))
	for k, v := range r.last {
		out[k] = v
	}
	return out
}

// waitOneActive waits until exactly one node is Active and every other
// running node answers standby or witness.
func (r *runner) waitOneActive(ctx context.Context, timeout time.Duration) (*testcluster.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		var active []*testcluster.Node
		settled := true
		var desc []string
		for _, n := range r.c.Nodes {
			if !n.Running() {
				desc = append(desc, n.ID+"=down")
				continue
			}
			s := r.health(ctx, n)
			desc = append(desc, fmt.Sprintf("%s=%s(%v)", n.ID, s.Role, s.OK))
			switch {
			case s.OK && s.Role == "active":
				active = append(active, n)
			case s.OK && (s.Role == "standby" || s.Role == "witness"):
			default:
				settled = false
			}
		}
		if len(active) == 1 && settled {
			return active[0], nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no single Active within %s: %s", timeout, strings.Join(desc, " "))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ---- workloads ----

// runEnqueuers runs clientsPerNode clients per data node until ctx ends.
// Each client sends to its own node, retrying an unacknowledged message
// under the same id a few times, as a real client would.
func (r *runner) runEnqueuers(ctx context.Context, tag string) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, n := range r.c.Nodes {
		if n.Witness {
			continue
		}
		for i := 0; i < r.cfg.ClientsPerNode; i++ {
			wg.Add(1)
			go func(n *testcluster.Node, i int) {
				defer wg.Done()
				for seq := 0; ctx.Err() == nil; seq++ {
					id := fmt.Sprintf("%s-%s-c%d-%d", tag, n.ID, i, seq)
					op := enqueueOp{ID: id, Node: n.ID, Invoke: time.Now()}
					for op.Attempts < 3 && !op.Acked && ctx.Err() == nil {
						op.Attempts++
						op.Acked = r.enqueue(ctx, n, id)
						if !op.Acked {
							sleepCtx(ctx, 100*time.Millisecond)
						}
					}
					op.Return = time.Now()
					r.mu.Lock()
					r.enq = append(r.enq, op)
					r.mu.Unlock()
					sleepCtx(ctx, 25*time.Millisecond)
				}
			}(n, i)
		}
	}
	return &wg
}

func (r *runner) enqueue(ctx context.Context, n *testcluster.Node, id string) bool {
	// Not ctx: a request in flight when the workload stops still completes,
	// so its acknowledgement is recorded rather than lost by the test.
	reqCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(reqCtx, http.MethodPost, "http://"+n.HTTPAddr+"/v1/sf/sink", bytes.NewReader(payloadFor(id)))
	req.Header.Set("Idempotency-Key", id)
	resp, err := r.http.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated
}

// runCAS runs clients that move the deploy pointer with compare-and-set:
// read the current revision (a possibly stale local read), then push new
// content expecting it (sometimes expecting a wrong one on purpose).
func (r *runner) runCAS(ctx context.Context, seed uint64) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := 0; i < r.cfg.CASClients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)+1))
			for seq := 0; ctx.Err() == nil; seq++ {
				r.mu.Lock()
				split := !r.splitAt.IsZero()
				r.mu.Unlock()
				if split {
					// A split pair has two registers by design
					// (availability over consistency): stop here.
					return
				}
				var hist controlpb.DeployHistoryResponse
				hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := r.ctlJSON(hctx, nil, &hist, "deploy", "history")
				cancel()
				if err != nil {
					sleepCtx(ctx, 300*time.Millisecond)
					continue
				}
				expect := int64(hist.Current)
				if rng.IntN(5) == 0 && expect > 0 {
					expect-- // a stale expectation: must be refused
				}
				site := testcluster.SiteConfig(fmt.Sprintf("cas-%d-%d", i, seq), map[string]string{"sink": r.sink.URL}, 1000000)
				sum := sha256.Sum256(site)
				op := casOp{Client: i, Expect: uint64(expect), SHA: hex.EncodeToString(sum[:]), Invoke: time.Now()}
				resp, outcome, err := r.push(context.WithoutCancel(ctx), site, expect)
				op.Return, op.Outcome = time.Now(), outcome
				if outcome == outcomeOK {
					op.Revision = resp.Revision
					if resp.Sha256 != op.SHA {
						op.Detail = "reply names content " + resp.Sha256
					}
				}
				if err != nil {
					op.Detail = err.Error()
				}
				r.mu.Lock()
				r.cas = append(r.cas, op)
				r.mu.Unlock()
				sleepCtx(ctx, time.Duration(200+rng.IntN(400))*time.Millisecond)
			}
		}(i)
	}
	return &wg
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// ---- nemesis ----

// pick chooses one of xs by p.
func pick[T any](xs []T, p uint64) T {
	return xs[p%uint64(len(xs))]
}

// current resolves who is Active, the standby(s) and the witness now.
func (r *runner) current() (active *testcluster.Node, epoch string, standbys []*testcluster.Node, witness *testcluster.Node) {
	roles := r.roles()
	for _, n := range r.c.Nodes {
		s := roles[n.ID]
		switch {
		case n.Witness:
			witness = n
		case s.OK && s.Role == "active" && active == nil:
			active, epoch = n, s.Epoch
		default:
			standbys = append(standbys, n)
		}
	}
	return active, epoch, standbys, witness
}

func (r *runner) others(n *testcluster.Node) []string {
	var out []string
	for _, m := range r.c.Nodes {
		if m != n {
			out = append(out, m.ID)
		}
	}
	return out
}

// cutBetween cuts every link between the two sides, both ways.
func cutBetween(a, b []string) []link {
	var out []link
	for _, x := range a {
		for _, y := range b {
			out = append(out, link{x, y}, link{y, x})
		}
	}
	return out
}

// inject starts f and returns what heals it.
func (r *runner) inject(f fault, ev *faultEvent) (func(), error) {
	active, epoch, standbys, witness := r.current()
	ev.EpochBefore = epoch
	if active == nil {
		// Nobody is Active right now (a slow recovery): aim at a standby.
		if len(standbys) == 0 {
			return func() {}, fmt.Errorf("no node to aim %s at", f.Kind)
		}
		active = standbys[0]
		standbys = standbys[1:]
	}
	standby := active
	if len(standbys) > 0 {
		standby = pick(standbys, f.Pick)
	}
	if witness == nil {
		witness = standby
	}
	kill := func(ns ...*testcluster.Node) func() {
		// A composed fault may kill a node the other half already
		// killed; only the half that killed it starts it again.
		var killed []*testcluster.Node
		for _, n := range ns {
			if n.Running() {
				killed = append(killed, n)
			}
			r.c.Kill(n)
			ev.Targets = append(ev.Targets, n.ID)
		}
		return func() {
			for _, n := range killed {
				if err := r.c.Start(n); err != nil {
					r.logf("restart %s: %v", n.ID, err)
				}
			}
		}
	}
	pause := func(n *testcluster.Node) func() {
		ev.Targets = append(ev.Targets, n.ID)
		r.c.Pause(n)
		return func() { r.c.Resume(n) }
	}
	// cut applies links, or pauses the lone side where links cannot be cut.
	cut := func(lone *testcluster.Node, links []link) (func(), error) {
		if !r.net.CanCut() {
			ev.Note = "degraded: partition simulated by SIGSTOP of " + lone.ID
			return pause(lone), nil
		}
		r.mu.Lock()
		r.cut = append(r.cut, links...)
		cuts, loss := append([]link(nil), r.cut...), r.loss
		r.mu.Unlock()
		err := r.net.Apply(cuts, loss)
		if at := r.net.CutAt(); !at.IsZero() {
			// The clock starts when the first links are cut (tens of ms
			// of tc processes after the round began on a loaded machine),
			// as a SIGKILL's starts at the signal.
			ev.Start = at
		}
		return func() {}, err
	}
	switch f.Kind {
	case faultKillActive:
		ev.NeedsFailover = true
		return kill(active), nil
	case faultKillStandby:
		return kill(standby), nil
	case faultKillWitness:
		return kill(witness), nil
	case faultKillAll:
		ev.NeedsFailover = true
		var all []*testcluster.Node
		for _, n := range r.c.Nodes {
			if n.Running() {
				all = append(all, n)
			}
		}
		return kill(all...), nil
	case faultPauseShort:
		return pause(active), nil
	case faultPauseLong:
		ev.NeedsFailover = true
		return pause(active), nil
	case faultPauseStandby:
		return pause(standby), nil
	case faultRestart:
		n := pick(r.c.Nodes, f.Pick)
		ev.Targets = append(ev.Targets, n.ID)
		r.c.Stop(n)
		return func() {
			if err := r.c.Start(n); err != nil {
				r.logf("restart %s: %v", n.ID, err)
			}
		}, nil
	case faultIsolateActive:
		ev.NeedsFailover = true
		ev.Targets = []string{active.ID}
		return cut(active, cutBetween([]string{active.ID}, append(r.others(active), hostSink, hostClient)))
	case faultIsolateWitness:
		ev.Targets = []string{witness.ID}
		return cut(witness, cutBetween([]string{witness.ID}, append(r.others(witness), hostSink, hostClient)))
	case faultPartition, faultPairShort, faultPairLong:
		lone := pick(r.c.Nodes, f.Pick)
		ev.Targets = []string{lone.ID}
		ev.NeedsFailover = lone == active
		if f.Kind == faultPairLong {
			r.mu.Lock()
			r.splitAt = time.Now()
			r.mu.Unlock()
		}
		return cut(lone, cutBetween([]string{lone.ID}, r.others(lone)))
	case faultPartitionOne:
		from := pick(r.c.Nodes, f.Pick)
		rest := r.others(from)
		to := pick(rest, f.Pick/7)
		ev.Targets = []string{from.ID + "→" + to}
		if !r.net.CanCut() {
			ev.Note = "degraded: one-way partition simulated by SIGSTOP of " + from.ID
			return pause(from), nil
		}
		return cut(from, []link{{from.ID, to}})
	case faultLoss:
		ev.Targets = []string{fmt.Sprintf("%.0f%% between nodes", f.Param*100)}
		if !r.net.CanCut() {
			ev.Note = "skipped: packet loss needs namespaces (tc BPF)"
			return func() {}, nil
		}
		r.mu.Lock()
		r.loss = f.Param
		cuts := append([]link(nil), r.cut...)
		r.mu.Unlock()
		return func() {}, r.net.Apply(cuts, f.Param)
	case faultLatency:
		ev.Targets = []string{fmt.Sprintf("+%.0fms per write on client connections", f.Param)}
		r.latencyMS.Store(int64(f.Param))
		return func() { r.latencyMS.Store(0) }, nil
	}
	return func() {}, fmt.Errorf("unknown fault %q", f.Kind)
}

// healNetwork removes every cut and the loss.
func (r *runner) healNetwork() error {
	r.mu.Lock()
	r.cut, r.loss = nil, 0
	r.mu.Unlock()
	if !r.net.CanCut() {
		return nil
	}
	return r.net.Apply(nil, 0)
}

// pairHealTimeout bounds the heal of a pair split once the link is back:
// the probe runs every 250 ms and a hand-over of the suite's messages
// takes well under a second; 1.2-2.6 s were measured (6.8 s before the
// loser redialled a connection stuck from before the partition).
const pairHealTimeout = 30 * time.Second

// runRound injects a round's faults, holds them, heals them and waits for
// the cluster to settle again.
func (r *runner) runRound(ctx context.Context, rd round) {
	var heals []func()
	var evs []*faultEvent
	for _, f := range rd.Faults {
		ev := &faultEvent{Round: rd.Index, Kind: f.Kind, Start: time.Now()}
		heal, err := r.inject(f, ev)
		if err != nil {
			ev.Note = strings.TrimSpace(ev.Note + " inject: " + err.Error())
		}
		heals = append(heals, heal)
		evs = append(evs, ev)
	}
	sleepCtx(ctx, rd.Faults[0].Hold)
	healed := time.Now()
	for i := len(heals) - 1; i >= 0; i-- {
		heals[i]()
	}
	if err := r.healNetwork(); err != nil {
		r.logf("round %d: heal network: %v", rd.Index, err)
	}
	var recovered time.Time
	defer func() {
		if recovered.IsZero() {
			// What a stuck node waits for is the diagnosis; it lands in
			// the node logs the report keeps.
			for _, n := range r.c.Nodes {
				r.c.DumpStacks(n)
			}
		}
	}()
	if rd.Faults[0].Kind == faultPairLong {
		// Both sides overrode and went Active; with the link back the
		// pair must heal by itself to one Active and one Standby.
		if _, err := r.waitOneActive(ctx, pairHealTimeout); err != nil {
			r.logf("round %d: no heal: %v", rd.Index, err)
			for _, ev := range evs {
				ev.Note = strings.TrimSpace(ev.Note + " no recovery: the split did not heal: " + err.Error())
			}
		} else {
			recovered = time.Now()
			r.logf("round %d: the split healed to one Active %s after the link returned", rd.Index, recovered.Sub(healed).Round(time.Millisecond))
			for _, ev := range evs {
				ev.Note = strings.TrimSpace(fmt.Sprintf("%s healed to one Active %s after the link returned", ev.Note, recovered.Sub(healed).Round(time.Millisecond)))
			}
		}
	} else if _, err := r.waitOneActive(ctx, 30*time.Second); err != nil {
		r.logf("round %d: %v", rd.Index, err)
		for _, ev := range evs {
			ev.Note = strings.TrimSpace(ev.Note + " no recovery: " + err.Error())
		}
	} else {
		recovered = time.Now()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range evs {
		ev.Healed, ev.Recovered = healed, recovered
		r.events = append(r.events, *ev)
	}
}

// snapshot copies the recorded history.
func (r *runner) snapshot() ([]enqueueOp, []casOp, []roleSample, []faultEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]enqueueOp(nil), r.enq...), append([]casOp(nil), r.cas...),
		append([]roleSample(nil), r.samples...), append([]faultEvent(nil), r.events...)
}

// buffered lists the ids still pending and parked, asking every node on
// its own (after a pair split each side holds its own buffer).
func (r *runner) buffered(ctx context.Context) (pending, parked map[string]bool, err error) {
	pending, parked = map[string]bool{}, map[string]bool{}
	var errs []error
	for _, n := range r.c.Nodes {
		if n.Witness || !n.Running() {
			continue
		}
		for _, p := range []bool{false, true} {
			var msgs []*controlpb.SFMessage
			args := []string{"sf", "list", "--target", "sink", "--limit", "10000000"}
			if p {
				args = append(args, "--parked")
			}
			if err := r.ctlJSON(ctx, []*testcluster.Node{n}, &msgs, args...); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", n.ID, err))
				continue
			}
			for _, m := range msgs {
				if p {
					parked[m.Id] = true
				} else {
					pending[m.Id] = true
				}
			}
		}
	}
	return pending, parked, errors.Join(errs...)
}
