package storeforward

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/role"
)

var _ Reader = (*fsm.FSM)(nil)

// newFSM opens a real FSM on a temp bbolt file.
func newFSM(t testing.TB, noSync bool) *fsm.FSM {
	t.Helper()
	f, err := fsm.Open(filepath.Join(t.TempDir(), "state.db"), fsm.Options{Logger: zerolog.Nop(), NoSync: noSync, InitialMmapSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// applyProposer applies commands straight into the FSM, as a single-node
// Raft would after commit. before, when set, runs before each apply and
// may block it or fail it.
type applyProposer struct {
	f  *fsm.FSM
	mu sync.Mutex
	// index is the next log index.
	index  uint64
	cmds   []*fsmpb.Command
	before func(ctx context.Context, cmd *fsmpb.Command) error
	// down makes every Propose fail like a node without a leader.
	down atomic.Bool
}

var errNoLeader = errors.New("test: no leader")

func (p *applyProposer) Propose(ctx context.Context, cmd *fsmpb.Command) (*fsm.Result, error) {
	if p.down.Load() {
		return nil, errNoLeader
	}
	if p.before != nil {
		if err := p.before(ctx, cmd); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	data, err := fsm.Encode(cmd)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.index++
	p.cmds = append(p.cmds, cmd)
	res := p.f.Apply(&raft.Log{Index: p.index, Term: 1, Type: raft.LogCommand, Data: data}).(*fsm.Result)
	return res, nil
}

// commands returns the proposed commands whose body matches pick.
func (p *applyProposer) commands(pick func(*fsmpb.Command) bool) []*fsmpb.Command {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*fsmpb.Command
	for _, c := range p.cmds {
		if pick(c) {
			out = append(out, c)
		}
	}
	return out
}

func isEnqueue(c *fsmpb.Command) bool   { return c.GetSfEnqueue() != nil }
func isDelivered(c *fsmpb.Command) bool { return c.GetSfDelivered() != nil }

// received is one request a test sink got.
type received struct {
	ID      string
	Epoch   string
	Body    string
	Headers http.Header
	Role    role.Role // the published role when the request arrived
}

// sink is an httptest server that records deliveries. respond decides the
// answer; nil means 200.
type sink struct {
	srv     *httptest.Server
	roles   *role.Broadcaster
	mu      sync.Mutex
	got     []received
	respond func(r received, n int) int // n counts requests with this id, from 1
	// header, when set (setHeader), adds headers to an answer.
	header func(r received, n int) http.Header
}

func (s *sink) setHeader(f func(r received, n int) http.Header) {
	s.mu.Lock()
	s.header = f
	s.mu.Unlock()
}

func newSink(t testing.TB, roles *role.Broadcaster, respond func(r received, n int) int) *sink {
	s := &sink{roles: roles, respond: respond}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec := received{ID: r.Header.Get(HeaderIdempotencyKey), Epoch: r.Header.Get(HeaderEpoch), Body: string(body), Headers: r.Header.Clone()}
		if s.roles != nil {
			rec.Role = s.roles.Current().Role
		}
		s.mu.Lock()
		s.got = append(s.got, rec)
		n := 0
		for _, g := range s.got {
			if g.ID == rec.ID {
				n++
			}
		}
		respond, header := s.respond, s.header
		s.mu.Unlock()
		if header != nil {
			for k, v := range header(rec, n) {
				w.Header()[k] = v
			}
		}
		status := http.StatusOK
		if respond != nil {
			status = respond(rec, n)
		}
		if status == 0 { // hang until the client gives up
			<-r.Context().Done()
			return
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) requests() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.got...)
}

func activeState(cluster, term uint64) role.State {
	return role.State{Role: role.Active, Epoch: role.Epoch{Cluster: cluster, Term: term}, NodeID: "n1", Leader: "n1", Voters: 1}
}

// harness is a single node: FSM, proposer, role stream, deliverer and
// enqueuer over it.
type harness struct {
	f     *fsm.FSM
	p     *applyProposer
	roles *role.Broadcaster
	d     *Deliverer
	e     *Enqueuer
	op    *Operator
	stop  func()
}

func newHarness(t testing.TB, initial role.State, targets ...Target) *harness {
	t.Helper()
	return newHarnessWith(t, initial, nil, targets...)
}

// newHarnessWith is newHarness with the deliverer's options adjusted by
// tune.
func newHarnessWith(t testing.TB, initial role.State, tune func(*DelivererOptions), targets ...Target) *harness {
	t.Helper()
	h := &harness{f: newFSM(t, true), roles: role.NewBroadcaster(initial)}
	h.p = &applyProposer{f: h.f}
	opts := DelivererOptions{Reader: h.f, Proposer: h.p, Roles: h.roles, Actor: "n1", Logger: zerolog.Nop()}
	if tune != nil {
		tune(&opts)
	}
	var err error
	h.d, err = NewDeliverer(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.d.SetTargets(targets); err != nil {
		t.Fatal(err)
	}
	h.e, err = NewEnqueuer(EnqueuerOptions{Proposer: h.p, Targets: h.d, Counts: h.f, Actor: "n1", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	h.op, err = NewOperator(OperatorOptions{Reader: h.f, Proposer: h.p, Targets: h.d, Live: h.d, Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.d.Run(ctx)
	}()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			<-done
			h.e.Close()
		})
	}
	t.Cleanup(h.stop)
	return h
}

func (h *harness) enqueue(t testing.TB, target, id, body string) EnqueueResult {
	t.Helper()
	res, err := h.e.Enqueue(context.Background(), target, []byte(body), id, nil)
	if err != nil {
		t.Fatalf("enqueue %s: %v", id, err)
	}
	return res
}

func (h *harness) stats(t testing.TB, target string) fsm.TargetStats {
	t.Helper()
	st, err := h.f.SFStats()
	if err != nil {
		t.Fatal(err)
	}
	return st[target]
}

// fastTarget retries quickly so failure tests run in milliseconds.
// newFailingSink answers every delivery with status until healed is set,
// then 200.
func newFailingSink(t testing.TB, h *harness, status int) (*sink, *atomic.Bool) {
	healed := &atomic.Bool{}
	return newSink(t, h.roles, func(received, int) int {
		if healed.Load() {
			return http.StatusOK
		}
		return status
	}), healed
}

func fastTarget(name, url string) Target {
	return Target{Name: name, URL: url, Timeout: 2 * time.Second, BackoffFloor: time.Millisecond, BackoffMax: 4 * time.Millisecond, MaxAttempts: 100}
}
