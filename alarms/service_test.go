package alarms

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/activegate"
	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/gateway"
	"github.com/scadad/scadad/internal/clock/clocktest"
	"github.com/scadad/scadad/internal/promtest"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/role/roletest"
	"github.com/scadad/scadad/storeforward"
)

// localRaft applies proposals straight to one FSM, as a sole leader would.
type localRaft struct {
	mu    sync.Mutex
	f     *fsm.FSM
	index uint64
	// failObserve fails that many AlarmObserve proposals, as a proposal
	// that timed out on a loaded leader.
	failObserve atomic.Int32
}

var errProposalTimedOut = errors.New("test: proposal timed out")

func (l *localRaft) Propose(_ context.Context, cmd *fsmpb.Command) (*fsm.Result, error) {
	if cmd.GetAlarmObserve() != nil && l.failObserve.Add(-1) >= 0 {
		return nil, errProposalTimedOut
	}
	data, err := fsm.Encode(cmd)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index++
	return l.f.Apply(&raft.Log{Index: l.index, Term: 1, Type: raft.LogCommand, Data: data}).(*fsm.Result), nil
}

type ackCall struct {
	conn, id, operator, comment string
	epoch                       role.Epoch
}

type fakeAcker struct {
	mu    sync.Mutex
	calls []ackCall
	err   error
}

func (a *fakeAcker) AcknowledgeAlarm(_ context.Context, conn, id, operator, comment string, epoch role.Epoch) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, ackCall{conn, id, operator, comment, epoch})
	return a.err
}

func (a *fakeAcker) n() int { a.mu.Lock(); defer a.mu.Unlock(); return len(a.calls) }

// memQueue is a store-and-forward stand-in that keeps ids like the buffer:
// an id already stored is a duplicate.
type memQueue struct {
	mu    sync.Mutex
	ids   map[string]int
	order []string
}

func (q *memQueue) Enqueue(_ context.Context, target string, payload []byte, id string, _ []storeforward.Header) (storeforward.EnqueueResult, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var rec HistoryRecord
	if err := json.Unmarshal(payload, &rec); err != nil || rec.ID != id {
		return storeforward.EnqueueResult{}, errors.New("bad payload")
	}
	q.ids[id]++
	if q.ids[id] > 1 {
		return storeforward.EnqueueResult{ID: id, Duplicate: true}, nil
	}
	q.order = append(q.order, id)
	return storeforward.EnqueueResult{ID: id}, nil
}

func (q *memQueue) stored() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.order...)
}

type svcRig struct {
	svc   *Service
	f     *fsm.FSM
	raft  *localRaft
	roles *role.Broadcaster
	acker *fakeAcker
	queue *memQueue
	reg   *prometheus.Registry
	stop  func()
}

func startService(t *testing.T, f *fsm.FSM, r *localRaft, roles *role.Broadcaster, q *memQueue, opts ...func(*Options)) *svcRig {
	t.Helper()
	reg := prometheus.NewRegistry()
	gate, err := activegate.NewCounter(reg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	rig := &svcRig{f: f, raft: r, roles: roles, acker: &fakeAcker{}, queue: q, reg: reg}
	o := Options{Proposer: r, State: f, Roles: roles, Acknowledger: rig.acker, Enqueuer: q, Gate: gate, Metrics: m,
		NodeID: "node-a", Logger: zerolog.Nop()}
	for _, opt := range opts {
		opt(&o)
	}
	rig.svc, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := rig.svc.SetConfig(Config{HistoryTarget: "historian"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = rig.svc.Run(ctx) }()
	rig.stop = func() { cancel(); <-done }
	t.Cleanup(rig.stop)
	return rig
}

func newFSM(t *testing.T) *fsm.FSM { return newFSMB(t) }

func newFSMB(t testing.TB) *fsm.FSM {
	t.Helper()
	f, err := fsm.Open(filepath.Join(t.TempDir(), "state.db"), fsm.Options{Logger: zerolog.Nop(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

var active = role.State{Role: role.Active, Voters: 2, Epoch: role.Epoch{Cluster: 1, Term: 3}}

func alarm(id string, active, acked bool, seq uint64) gateway.Alarm {
	return gateway.Alarm{ID: id, Source: "Z28061", Condition: "HiLevel", Severity: 800, Message: "high", Active: active, Acked: acked, Seq: seq}
}

func TestAckReachesTheGatewayWithTheEpochOnlyOnTheActive(t *testing.T) {
	f := newFSM(t)
	r := &localRaft{f: f}
	roles := role.NewBroadcaster(active)
	rig := startService(t, f, r, roles, &memQueue{ids: map[string]int{}})
	mustSnapshot(t, rig.svc, "mx1", "Z28061", []gateway.Alarm{alarm("A1", true, false, 1), alarm("A2", true, false, 1)})
	testwait.For(t, 5*time.Second, "snapshot recorded", func() bool { recs, _ := f.Alarms(); return len(recs) == 2 })

	// Standby, and Detached on a pair: refused, counted, nothing reaches
	// the gateway.
	for _, st := range []role.State{{Role: role.Standby, Voters: 2}, {Role: role.Detached}} {
		roles.Publish(st)
		err := rig.svc.Acknowledge(context.Background(), "A1", "alice", "")
		var na *NotActiveError
		if !errors.As(err, &na) {
			t.Fatalf("ack as %v: %v, want NotActiveError", st.Role, err)
		}
	}
	if n := rig.acker.n(); n != 0 {
		t.Fatalf("%d acks reached the gateway from a non-Active node", n)
	}
	if v, _, _ := promtest.Value(rig.reg, "scadad_gate_denied_total", activegate.ReasonRoleUnknown); v != 1 {
		t.Fatalf("gate denied role-unknown = %v, want 1", v)
	}
	roles.Publish(active)
	if err := rig.svc.Acknowledge(context.Background(), "A1", "alice", "seen"); err != nil {
		t.Fatal(err)
	}
	if c := rig.acker.calls[0]; c.conn != "mx1" || c.id != "A1" || c.operator != "alice" || c.epoch != active.Epoch {
		t.Fatalf("gateway ack %+v, want A1 by alice on mx1 at epoch %v", c, active.Epoch)
	}
	rec, _, _ := f.Alarm("A1")
	if !rec.Acked || rec.AckOperator != "alice" || rec.AckComment != "seen" {
		t.Fatalf("A1 = %+v", rec)
	}
	// A gateway refusal is the operator's answer, and nothing is recorded.
	rig.acker.err = errors.New("stale epoch")
	if err := rig.svc.Acknowledge(context.Background(), "A2", "bob", ""); err == nil {
		t.Fatal("ack refused by the gateway reported success")
	}
	if rec, _, _ := f.Alarm("A2"); rec.Acked {
		t.Fatal("an ack the gateway refused was recorded")
	}
	if err := rig.svc.Acknowledge(context.Background(), "nope", "bob", ""); !errors.Is(err, ErrUnknownAlarm) {
		t.Fatalf("ack of an unknown alarm: %v", err)
	}
}

// TestHistoryExactlyOnceAcrossAFailover: the first Active enqueues some
// transitions and dies before raising the mark for the rest; the next
// Active (a new service on the same replicated state) enqueues from the
// mark, and every transition is stored once by id.
func TestHistoryExactlyOnceAcrossAFailover(t *testing.T) {
	f := newFSM(t)
	r := &localRaft{f: f}
	q := &memQueue{ids: map[string]int{}}
	roles := role.NewBroadcaster(active)
	rig := startService(t, f, r, roles, q)
	mustSnapshot(t, rig.svc, "mx1", "Z28061", []gateway.Alarm{alarm("A1", true, false, 1), alarm("A2", true, false, 1)})
	testwait.For(t, 5*time.Second, "two raises enqueued", func() bool { return len(q.stored()) == 2 })
	testwait.For(t, 5*time.Second, "mark raised", func() bool { _, mark, _ := f.AlarmLogPosition(); return mark == 2 })
	rig.stop()
	// The old Active recorded two more transitions and enqueued one of
	// them before dying; the mark stayed at 2.
	if _, err := r.Propose(context.Background(), &fsmpb.Command{Body: &fsmpb.Command_AlarmAck{AlarmAck: &fsmpb.AlarmAck{AlarmId: "A1", Operator: "alice"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Propose(context.Background(), &fsmpb.Command{Body: &fsmpb.Command_AlarmObserve{AlarmObserve: &fsmpb.AlarmObserve{Conditions: []*fsmpb.AlarmCondition{
		nativeCondition("mx1", alarm("A2", false, false, 2))}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(context.Background(), "historian", mustPayload(t, f, 3), HistoryID("A1", 2), nil); err != nil {
		t.Fatal(err)
	}
	roles2 := role.NewBroadcaster(role.State{Role: role.Standby, Voters: 2})
	rig2 := startService(t, f, r, roles2, q)
	roles2.Publish(active)
	// Nudge the state so the new Active looks (any applied entry does).
	if _, err := r.Propose(context.Background(), &fsmpb.Command{Body: &fsmpb.Command_Noop{Noop: &fsmpb.Noop{}}}); err != nil {
		t.Fatal(err)
	}
	want := []string{HistoryID("A1", 1), HistoryID("A2", 1), HistoryID("A1", 2), HistoryID("A2", 2)}
	testwait.For(t, 5*time.Second, "every transition enqueued", func() bool { return len(q.stored()) == len(want) })
	got := q.stored()
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("stored %v, want %v", got, want)
		}
	}
	testwait.For(t, 5*time.Second, "mark at the end", func() bool { _, mark, _ := f.AlarmLogPosition(); return mark == 4 })
	_ = rig2
}

func mustPayload(t *testing.T, f *fsm.FSM, logSeq uint64) []byte {
	t.Helper()
	es, err := f.AlarmLogAfter(logSeq-1, 1)
	if err != nil || len(es) != 1 {
		t.Fatalf("log %d: %v %v", logSeq, es, err)
	}
	p, err := historyPayload(es[0])
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestStandbyEmitsNoHistoryAndCountsTheDenial(t *testing.T) {
	f := newFSM(t)
	r := &localRaft{f: f}
	q := &memQueue{ids: map[string]int{}}
	roles := role.NewBroadcaster(active)
	rig := startService(t, f, r, roles, q)
	mustSnapshot(t, rig.svc, "mx1", "Z28061", []gateway.Alarm{alarm("A1", true, false, 1)})
	testwait.For(t, 5*time.Second, "raise enqueued", func() bool { return len(q.stored()) == 1 })
	roles.Publish(role.State{Role: role.Standby, Voters: 2})
	// Transitions committed by another Active while this node is Standby.
	if _, err := r.Propose(context.Background(), &fsmpb.Command{Body: &fsmpb.Command_AlarmAck{AlarmAck: &fsmpb.AlarmAck{AlarmId: "A1", Operator: "alice"}}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "metrics follow the replicated ack", func() bool {
		v, _, _ := promtest.Value(rig.reg, "scadad_alarm_transitions_total", "acknowledged")
		return v == 1
	})
	if n := len(q.stored()); n != 1 {
		t.Fatalf("the Standby enqueued %d more", n-1)
	}
	// A snapshot reaching a Standby's (hot) worker is not recorded.
	var na *NotActiveError
	if err := rig.svc.AlarmSnapshot(context.Background(), "mx1", "Z28061", []gateway.Alarm{alarm("B1", true, false, 1)}); !errors.As(err, &na) {
		t.Fatalf("a refresh on the Standby: %v, want NotActiveError (the worker retries)", err)
	}
	if _, ok, _ := f.Alarm("B1"); ok {
		t.Fatal("a Standby recorded a field observation")
	}
	// A (hot) Standby's streamed transition and limit level change are the
	// alarm emit the gate denies, counted.
	rig.svc.AlarmChange("mx1", alarm("B2", true, false, 1))
	if err := rig.svc.SetConfig(Config{HistoryTarget: "historian", Limits: []Limit{{ID: "L", Instance: "T", Attribute: "PV", Hi: &Threshold{10, 900}}}}); err != nil {
		t.Fatal(err)
	}
	rig.svc.TagUpdate("T", "PV", 20.0, true)
	if v := deniedAt(t, rig.reg, activegate.SurfaceAlarmEmit, activegate.ReasonSecondary); v != 2 {
		t.Fatalf("alarm-emit denials on the Standby = %v, want 2", v)
	}
	if _, ok, _ := f.Alarm("L"); ok {
		t.Fatal("a Standby recorded a limit alarm")
	}
}

func TestReconcileResendsTheReplicatedAckTheGatewayLacks(t *testing.T) {
	f := newFSM(t)
	r := &localRaft{f: f}
	rig := startService(t, f, r, role.NewBroadcaster(active), &memQueue{ids: map[string]int{}})
	mustSnapshot(t, rig.svc, "mx1", "Z28061", []gateway.Alarm{alarm("A1", true, false, 1)})
	testwait.For(t, 5*time.Second, "recorded", func() bool { _, ok, _ := f.Alarm("A1"); return ok })
	// Recorded acknowledged (the old Active), never reached the gateway.
	if _, err := r.Propose(context.Background(), &fsmpb.Command{Body: &fsmpb.Command_AlarmAck{AlarmAck: &fsmpb.AlarmAck{AlarmId: "A1", Operator: "alice", Comment: "c"}}}); err != nil {
		t.Fatal(err)
	}
	mustSnapshot(t, rig.svc, "mx1", "Z28061", []gateway.Alarm{alarm("A1", true, false, 1)})
	testwait.For(t, 5*time.Second, "ack re-sent", func() bool { return rig.acker.n() == 1 })
	if c := rig.acker.calls[0]; c.id != "A1" || c.operator != "alice" || c.comment != "c" {
		t.Fatalf("re-sent %+v", c)
	}
}

func TestLimitAlarmDeadbandAndOnDelay(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	var got []*fsmpb.AlarmCondition
	e := newLimitEvaluator(clk, func(c *fsmpb.AlarmCondition) { got = append(got, c) })
	err := e.set([]Limit{{ID: "T.Limit", Instance: "T", Attribute: "PV", Hi: &Threshold{80, 600}, HiHi: &Threshold{95, 900},
		Lo: &Threshold{10, 500}, Deadband: 2, OnDelay: time.Second, Message: "tank"}})
	if err != nil {
		t.Fatal(err)
	}
	states := func() []string {
		var out []string
		for _, c := range got {
			out = append(out, c.ConditionState)
		}
		return out
	}
	e.update("T", "PV", 85.0, true) // Hi pending
	clk.Advance(500 * time.Millisecond)
	e.update("T", "PV", 79.0, true) // back below before the on-delay: nothing
	e.update("T", "PV", 85.0, true)
	clk.Advance(time.Second)
	e.update("T", "PV", 86.0, true) // held for the on-delay: Hi
	if s := states(); len(s) != 1 || s[0] != LevelHi || got[0].Severity != 600 || !got[0].Active {
		t.Fatalf("after holding 85: %v", s)
	}
	e.update("T", "PV", 79.0, true) // within the deadband (80-2): stays Hi
	e.update("T", "PV", "junk", true)
	e.update("T", "PV", 50.0, false) // bad quality: ignored
	if s := states(); len(s) != 1 {
		t.Fatalf("deadband or bad values moved the level: %v", s)
	}
	e.update("T", "PV", 77.0, true) // past the deadband: Normal at once
	if s := states(); len(s) != 2 || s[1] != LevelNormal || got[1].Active {
		t.Fatalf("after 77: %v", s)
	}
	for _, bad := range []Limit{
		{ID: "x", Instance: "T", Attribute: "PV"},
		{ID: "x", Instance: "T", Attribute: "PV", Hi: &Threshold{10, 500}, Lo: &Threshold{20, 500}},
		{ID: "x", Instance: "T", Attribute: "PV", Hi: &Threshold{10, 0}},
		{ID: "x", Instance: "T", Attribute: "PV", Hi: &Threshold{10, 5}, Deadband: -1},
	} {
		if err := e.set([]Limit{bad}); err == nil {
			t.Errorf("limit %+v accepted", bad)
		}
	}
}

func TestLimitOnDelayCompletesWithoutANewValue(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	var got []*fsmpb.AlarmCondition
	e := newLimitEvaluator(clk, func(c *fsmpb.AlarmCondition) { mu.Lock(); got = append(got, c); mu.Unlock() })
	if err := e.set([]Limit{{ID: "T.Limit", Instance: "T", Attribute: "PV", Hi: &Threshold{80, 600}, OnDelay: time.Second}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.run(ctx)
	e.update("T", "PV", 90.0, true)
	testwait.For(t, 5*time.Second, "on-delay timer armed", func() bool { return clk.Waiting() >= 1 })
	clk.Advance(time.Second)
	testwait.For(t, 5*time.Second, "Hi after the on-delay", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 1 && got[0].ConditionState == LevelHi
	})
}

func mustSnapshot(t *testing.T, s *Service, conn, source string, alarms []gateway.Alarm) {
	t.Helper()
	if err := s.AlarmSnapshot(context.Background(), conn, source, alarms); err != nil {
		t.Fatal(err)
	}
}

func deniedAt(t *testing.T, reg *prometheus.Registry, surface, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "scadad_gate_denied_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var s, r string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "surface":
					s = l.GetValue()
				case "reason":
					r = l.GetValue()
				}
			}
			if s == surface && r == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// A transition streamed to the Active while its quorum confirmation is late
// for a moment is recorded once the confirmation is back: nothing else
// would send it again (the gateway streams each transition once; a refresh
// comes only with a new session or a new Active).
func TestATransitionDuringALateConfirmationIsRecorded(t *testing.T) {
	f := newFSM(t)
	r := &localRaft{f: f}
	roles := roletest.New(active)
	rig := startService(t, f, r, roles.Broadcaster, &memQueue{ids: map[string]int{}}, func(o *Options) { o.Roles = roles })
	roles.Late()
	rig.svc.AlarmChange("mx1", alarm("B1", true, false, 1))
	testwait.For(t, 5*time.Second, "the transition waiting for the confirmation", func() bool { return roles.Asked() >= 3 })
	if _, ok, _ := f.Alarm("B1"); ok {
		t.Fatal("recorded while the node was not confirmed Active")
	}
	roles.Confirmed()
	testwait.For(t, 5*time.Second, "B1 recorded once the confirmation is back", func() bool { _, ok, _ := f.Alarm("B1"); return ok })
}

// A streamed transition whose commit fails for a moment on the Active (a
// proposal timed out) is committed again: the gateway streams it once, and
// the next refresh may be hours away.
func TestATransitionWhoseCommitFailsOnceIsRecorded(t *testing.T) {
	f := newFSM(t)
	r := &localRaft{f: f}
	r.failObserve.Store(1)
	rig := startService(t, f, r, role.NewBroadcaster(active), &memQueue{ids: map[string]int{}})
	rig.svc.AlarmChange("mx1", alarm("C1", true, false, 1))
	testwait.For(t, 5*time.Second, "C1 recorded after its first commit failed", func() bool { _, ok, _ := f.Alarm("C1"); return ok })
	if n := r.failObserve.Load(); n >= 0 {
		t.Fatalf("the failing commit was not tried (%d failures left)", n+1)
	}
}

// A transition applied while the Active's quorum confirmation is late for
// a moment reaches the alarm-history target once the confirmation is
// back, without waiting for some later entry to be applied (on a quiet
// site there may be none for hours).
func TestHistoryOfATransitionAppliedDuringALateConfirmationIsEnqueued(t *testing.T) {
	f := newFSM(t)
	r := &localRaft{f: f}
	q := &memQueue{ids: map[string]int{}}
	roles := roletest.New(active)
	rig := startService(t, f, r, roles.Broadcaster, q, func(o *Options) { o.Roles = roles })
	mustSnapshot(t, rig.svc, "mx1", "Z28061", []gateway.Alarm{alarm("A1", true, false, 1)})
	testwait.For(t, 5*time.Second, "the raise enqueued", func() bool { return len(q.stored()) == 1 })

	roles.Late()
	asked := roles.Asked()
	if _, err := r.Propose(context.Background(), &fsmpb.Command{Body: &fsmpb.Command_AlarmAck{AlarmAck: &fsmpb.AlarmAck{AlarmId: "A1", Operator: "alice"}}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "the ack applied and counted", func() bool {
		v, _, _ := promtest.Value(rig.reg, "scadad_alarm_transitions_total", "acknowledged")
		return v == 1
	})
	testwait.For(t, 5*time.Second, "the history emit looking at the role", func() bool { return roles.Asked() > asked })
	roles.Confirmed()
	testwait.For(t, 5*time.Second, "the ack's history enqueued with nothing else applied", func() bool { return len(q.stored()) == 2 })
}

// A node that becomes the Active while its first quorum confirmation is
// still to come records the limit alarms it evaluated as a Standby once
// the confirmation comes, without waiting for some later entry to be
// applied.
func TestANewActiveConfirmedLateRecordsItsLimitAlarms(t *testing.T) {
	f := newFSM(t)
	r := &localRaft{f: f}
	roles := roletest.New(role.State{Role: role.Standby, Voters: 2})
	rig := startService(t, f, r, roles.Broadcaster, &memQueue{ids: map[string]int{}}, func(o *Options) { o.Roles = roles })
	if err := rig.svc.SetConfig(Config{HistoryTarget: "historian", Limits: []Limit{{ID: "L", Instance: "T", Attribute: "PV", Hi: &Threshold{10, 900}}}}); err != nil {
		t.Fatal(err)
	}
	rig.svc.TagUpdate("T", "PV", 20.0, true) // evaluated as a Standby, not recorded
	roles.Late()
	roles.Publish(active)
	asked := roles.Asked()
	if _, err := r.Propose(context.Background(), &fsmpb.Command{Body: &fsmpb.Command_Noop{Noop: &fsmpb.Noop{}}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "the new Active looking at its role", func() bool { return roles.Asked() > asked })
	roles.Confirmed()
	testwait.For(t, 5*time.Second, "the limit alarm recorded once confirmed", func() bool { _, ok, _ := f.Alarm("L"); return ok })
}
