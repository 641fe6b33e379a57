package raftnode

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/lockedbuf"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/pki"
	"github.com/scadad/scadad/role"
)

// testFSM behaves like the real persistent FSM in what raftnode relies on:
// it keeps its applied index, skips entries at or below it, survives a node
// restart (the harness reuses the object) and carries a cluster epoch.
type testFSM struct {
	mu      sync.Mutex
	applied uint64
	epoch   uint64
	values  []string
	// shown holds applied and epoch for the readers that, as on the real
	// FSM (its Meta), never wait for an apply.
	shownApplied, shownEpoch atomic.Uint64
}

// showLocked publishes applied and epoch; the caller holds mu.
func (f *testFSM) showLocked() {
	f.shownApplied.Store(f.applied)
	f.shownEpoch.Store(f.epoch)
}

type testFSMState struct {
	Applied uint64   `json:"applied"`
	Epoch   uint64   `json:"epoch"`
	Values  []string `json:"values"`
}

func (f *testFSM) Apply(l *raft.Log) interface{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.Index <= f.applied {
		return nil
	}
	f.applied = l.Index
	defer f.showLocked()
	cmd := string(l.Data)
	if rest, ok := strings.CutPrefix(cmd, "epoch:"); ok {
		e, err := strconv.ParseUint(rest, 10, 64)
		if err != nil || e <= f.epoch {
			return fmt.Errorf("epoch %q must increase from %d", rest, f.epoch)
		}
		f.epoch = e
		return e
	}
	f.values = append(f.values, cmd)
	return len(f.values)
}

func (f *testFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	body, err := json.Marshal(testFSMState{Applied: f.applied, Epoch: f.epoch, Values: append([]string(nil), f.values...)})
	return testSnapshot(body), err
}

func (f *testFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var st testFSMState
	if err := json.NewDecoder(rc).Decode(&st); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied, f.epoch, f.values = st.Applied, st.Epoch, st.Values
	f.showLocked()
	return nil
}

func (f *testFSM) ClusterEpoch() uint64 { return f.shownEpoch.Load() }

func (f *testFSM) AppliedIndex() uint64 { return f.shownApplied.Load() }

// reset empties the FSM, as the real FSM's wipe does before a rejoin.
func (f *testFSM) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied, f.epoch, f.values = 0, 0, nil
	f.showLocked()
}

func (f *testFSM) Values() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.values...)
}

type testSnapshot []byte

func (s testSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}
func (s testSnapshot) Release() {}

type harness struct {
	t       testing.TB
	mode    Mode
	site    *pki.Site
	members []Member
	tweak   func(*Config)

	mu        sync.Mutex
	nodes     map[string]*Node
	fsms      map[string]*testFSM
	dirs      map[string]string
	logs      map[string]*lockedbuf.Buffer
	overrides map[string]*atomic.Int32
	tls       map[string][2]*tls.Config // optional per-node (server, client) override
	bind      map[string]string         // optional listen address when peers dial a proxy
	sawActive map[string]*atomic.Bool
}

const (
	testOverrideAfter = 1500 * time.Millisecond
	testProbeInterval = 100 * time.Millisecond
)

// newHarness reserves a loopback port per member and generates the site
// PKI. witness names the witness member ("" for none).
func newHarness(t testing.TB, mode Mode, ids []string, witness string) *harness {
	t.Helper()
	site, err := pki.GenerateSite("test-site", ids, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{
		t: t, mode: mode, site: site,
		nodes: map[string]*Node{}, fsms: map[string]*testFSM{}, dirs: map[string]string{},
		logs: map[string]*lockedbuf.Buffer{}, overrides: map[string]*atomic.Int32{}, tls: map[string][2]*tls.Config{}, bind: map[string]string{},
		sawActive: map[string]*atomic.Bool{},
	}
	// Distinct ports below the ephemeral range: ports picked one by one
	// with :0 and closed at once can repeat (two members once shared one).
	ports, err := testcluster.FreePorts(len(ids))
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		addr := fmt.Sprintf("127.0.0.1:%d", ports[i])
		h.members = append(h.members, Member{ID: id, RaftAddr: addr, Witness: id == witness})
		h.fsms[id] = &testFSM{}
		h.dirs[id] = filepath.Join(t.TempDir(), id)
		h.logs[id] = &lockedbuf.Buffer{}
		h.overrides[id] = &atomic.Int32{}
		h.sawActive[id] = &atomic.Bool{}
	}
	t.Cleanup(func() {
		h.mu.Lock()
		nodes := h.nodes
		h.nodes = map[string]*Node{}
		h.mu.Unlock()
		for _, n := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = n.Shutdown(ctx)
			cancel()
		}
		if dir := os.Getenv("RAFTNODE_TEST_LOGDIR"); dir != "" {
			for _, m := range h.members {
				_ = os.WriteFile(filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+m.ID+".log"), []byte(h.logs[m.ID].String()), 0o644)
			}
		}
		if t.Failed() {
			for _, m := range h.members {
				t.Logf("==== logs of %s ====\n%s", m.ID, h.logs[m.ID].String())
			}
		}
	})
	return h
}

func (h *harness) member(id string) Member {
	for _, m := range h.members {
		if m.ID == id {
			return m
		}
	}
	h.t.Fatalf("no member %s", id)
	return Member{}
}

func (h *harness) config(id string) Config {
	srv, err := h.site.ServerTLS(id)
	if err != nil {
		h.t.Fatal(err)
	}
	cli, err := h.site.ClientTLS(id)
	if err != nil {
		h.t.Fatal(err)
	}
	if pair, ok := h.tls[id]; ok {
		srv, cli = pair[0], pair[1]
	}
	fsm := h.fsms[id]
	count := h.overrides[id]
	var self *Node
	bind := h.member(id).RaftAddr
	if b, ok := h.bind[id]; ok {
		bind = b
	}
	cfg := Config{
		NodeID:        id,
		BindAddr:      bind,
		AdvertiseAddr: h.member(id).RaftAddr,
		DataDir:       h.dirs[id],
		Members:       h.members,
		Mode:          h.mode,
		OverrideAfter: testOverrideAfter,
		ProbeInterval: testProbeInterval,
		ProbeTimeout:  300 * time.Millisecond,
		ServerTLS:     srv,
		ClientTLS:     cli,
		Logger:        zerolog.New(h.logs[id]).With().Timestamp().Logger().Level(zerolog.DebugLevel),
		FSM:           fsm,
		AppliedIndex:  fsm.AppliedIndex,
		OnOverride: func(ctx context.Context, epoch uint64) error {
			count.Add(1)
			_, err := self.Apply(ctx, []byte(fmt.Sprintf("epoch:%d", epoch)))
			return err
		},
	}
	if h.tweak != nil {
		h.tweak(&cfg)
	}
	// The callback needs the node it belongs to.
	cfg.OnOverride = func(inner func(context.Context, uint64) error) func(context.Context, uint64) error {
		return func(ctx context.Context, epoch uint64) error {
			h.mu.Lock()
			self = h.nodes[id]
			h.mu.Unlock()
			if self == nil {
				return fmt.Errorf("node %s not registered yet", id)
			}
			return inner(ctx, epoch)
		}
	}(cfg.OnOverride)
	return cfg
}

func (h *harness) start(id string) *Node {
	h.t.Helper()
	var n *Node
	var err error
	// The port was released when it was reserved or when the node stopped;
	// retry briefly in case the OS has not let go of it yet.
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err = New(h.config(id))
		if err == nil || time.Now().After(deadline) || !strings.Contains(err.Error(), "address already in use") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		h.t.Fatalf("start %s: %v", id, err)
	}
	h.mu.Lock()
	h.nodes[id] = n
	h.mu.Unlock()
	ch, stop := n.Role().Watch()
	saw := h.sawActive[id]
	go func() {
		defer stop()
		for {
			select {
			case st := <-ch:
				if st.Role == role.Active {
					saw.Store(true)
				}
			case <-n.ctx.Done():
				return
			}
		}
	}()
	return n
}

// kill stops a node abruptly: no leadership transfer, no goodbye.
func (h *harness) kill(id string) {
	h.t.Helper()
	h.mu.Lock()
	n := h.nodes[id]
	delete(h.nodes, id)
	h.mu.Unlock()
	if n == nil {
		h.t.Fatalf("kill %s: not running", id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		h.t.Fatalf("kill %s: %v", id, err)
	}
}

func (h *harness) node(id string) *Node {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nodes[id]
}

func (h *harness) running() map[string]*Node {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]*Node, len(h.nodes))
	for k, v := range h.nodes {
		out[k] = v
	}
	return out
}

// roles returns the current published role of every running node.
func (h *harness) roles() map[string]role.State {
	out := map[string]role.State{}
	for id, n := range h.running() {
		out[id] = n.Role().Current()
	}
	return out
}

// waitOneActive waits until exactly one running node is Active and every
// other running node is Standby or Witness, and returns the Active one.
func (h *harness) waitOneActive(timeout time.Duration) string {
	h.t.Helper()
	var active string
	testwait.ForDetail(h.t, timeout, "exactly one Active", func() (bool, string) {
		active = ""
		roles := h.roles()
		for id, st := range roles {
			switch st.Role {
			case role.Active:
				if active != "" {
					return false, fmt.Sprintf("two Active: %s and %s", active, id)
				}
				active = id
			case role.Standby, role.Witness:
			default:
				return false, fmt.Sprintf("%s is %s (%v)", id, st.Role, roles)
			}
		}
		return active != "", fmt.Sprint(roles)
	})

	return active
}

// holdApplies makes id's state machine hold every apply (a disk that
// stopped answering) until the returned func, or the test's end,
// releases it.
func (h *harness) holdApplies(id string) (release func()) {
	f := h.fsms[id]
	f.mu.Lock()
	var once sync.Once
	release = func() { once.Do(f.mu.Unlock) }
	h.t.Cleanup(release)
	return release
}

// threeNodes starts two voters and a witness, waits for a leader and
// applies one entry through it; it returns the harness and the leader.
func threeNodes(t *testing.T) (*harness, string) {
	t.Helper()
	h := newHarness(t, ModeWitness, []string{"a", "b", "w"}, "w")
	for _, id := range []string{"a", "b", "w"} {
		h.start(id)
	}
	leader := h.waitOneActive(15 * time.Second)
	h.apply(leader, "before")
	return h, leader
}

func (h *harness) apply(id, cmd string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := h.node(id).Apply(ctx, []byte(cmd))
	if err != nil {
		h.t.Fatalf("apply %q on %s: %v", cmd, id, err)
	}
	if e, ok := resp.(error); ok {
		h.t.Fatalf("apply %q on %s: FSM said %v", cmd, id, e)
	}
}

// reservePorts returns n distinct free loopback addresses (see
// testcluster.FreePorts).
func reservePorts(t testing.TB, n int) []string {
	t.Helper()
	ports, err := testcluster.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	addrs := make([]string, n)
	for i, p := range ports {
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	return addrs
}

// proxy forwards a member's advertised address to where the node really
// listens; blocking it cuts the member off the network both ways.
type proxy struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	blocked bool
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

func newProxy(t *testing.T, listen, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.loop()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) loop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		blocked := p.blocked
		p.mu.Unlock()
		if blocked {
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
		}
		go pipe(up, c)
		go pipe(c, up)
	}
}

func (p *proxy) block(b bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = b
	if b {
		for c := range p.conns {
			_ = c.Close()
		}
		p.conns = map[net.Conn]struct{}{}
	}
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.block(true)
	p.wg.Wait()
}
