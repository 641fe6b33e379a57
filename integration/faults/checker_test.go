package faults

import (
	"net"
	"reflect"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestBPFDropProgram(t *testing.T) {
	frame := func(etherType uint16, dst string) []byte {
		pkt := make([]byte, 14+20)
		pkt[12], pkt[13] = byte(etherType>>8), byte(etherType)
		copy(pkt[30:34], net.ParseIP(dst).To4())
		return pkt
	}
	target := net.ParseIP("192.0.2.12")
	cases := []struct {
		name string
		p    float64
		pkt  []byte
		rand uint32
		drop bool
	}{
		{"ipv4 to target dropped", 1, frame(0x0800, "192.0.2.12"), 0, true},
		{"ipv4 elsewhere passes", 1, frame(0x0800, "192.0.2.13"), 0, false},
		{"arp passes", 1, frame(0x0806, "192.0.2.12"), 0, false},
		{"short frame passes", 1, []byte{0, 1, 2}, 0, false},
		{"loss: low random drops", 0.25, frame(0x0800, "192.0.2.12"), 1 << 20, true},
		{"loss: high random passes", 0.25, frame(0x0800, "192.0.2.12"), 3 << 30, false},
		{"loss: other destination never dropped", 0.25, frame(0x0800, "192.0.2.99"), 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ret, err := runBPF(bpfDropProgram(target, c.p), c.pkt, func() uint32 { return c.rand })
			if err != nil {
				t.Fatal(err)
			}
			if got := ret != 0; got != c.drop {
				t.Fatalf("drop = %v (ret %#x), want %v", got, ret, c.drop)
			}
		})
	}
	code := bpfDropBytecode(target, 1)
	if !strings.HasPrefix(code, "6,40 0 0 12,21 0 3 2048,") {
		t.Fatalf("bytecode %q", code)
	}
}

func TestBPFLossRate(t *testing.T) {
	prog := bpfDropProgram(net.ParseIP("192.0.2.1"), 0.3)
	pkt := make([]byte, 34)
	pkt[12] = 0x08
	copy(pkt[30:], []byte{192, 0, 2, 1})
	var x uint32 = 2463534242
	xorshift := func() uint32 { x ^= x << 13; x ^= x >> 17; x ^= x << 5; return x }
	drops := 0
	const n = 100000
	for i := 0; i < n; i++ {
		if ret, _ := runBPF(prog, pkt, xorshift); ret != 0 {
			drops++
		}
	}
	if rate := float64(drops) / n; rate < 0.28 || rate > 0.32 {
		t.Fatalf("drop rate %.3f, want about 0.30", rate)
	}
}

func TestCheckDeliveries(t *testing.T) {
	ops := []enqueueOp{
		{ID: "a", Acked: true}, {ID: "b", Acked: true}, {ID: "c", Acked: true},
		{ID: "d", Acked: true}, {ID: "e", Acked: false}, {ID: "f", Acked: true},
	}
	ok := func(id string) delivery { return delivery{ID: id, SHA256: payloadSHA(id), Status: 200} }
	ds := []delivery{
		ok("a"), ok("a"), ok("a"), // two duplicates of a
		ok("e"), // unacked but delivered: allowed
		{ID: "b", SHA256: payloadSHA("b"), Status: 503},   // a refusal is no delivery
		{ID: "zz", SHA256: payloadSHA("zz"), Status: 200}, // nobody sent zz
		{ID: "d", SHA256: payloadSHA("x"), Status: 200},   // d's id on another body
	}
	r := checkDeliveries(ops, ds, map[string]bool{"c": true}, map[string]bool{"f": true})
	want := deliveryResult{
		Attempted: 6, Acked: 5, Delivered: 2, Pending: 1, Parked: 1,
		Lost: 2, LostIDs: []string{"b", "d"}, Duplicates: 2, DupIDs: 1,
		Foreign: 2, ForeignIDs: []string{"zz", "d"}, UnackedDelivered: 1,
	}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("got  %+v\nwant %+v", r, want)
	}
}

func TestCheckCAS(t *testing.T) {
	init := pointer{Rev: 1, SHA: "s1"}
	cas := func(client int, expect uint64, sha string, inv, ret int, outcome string, rev uint64) casOp {
		return casOp{Client: client, Expect: expect, SHA: sha, Invoke: at(inv), Return: at(ret), Outcome: outcome, Revision: rev}
	}
	read := func(inv int, rev uint64, sha string) casOp {
		return casOp{Client: 9, Read: true, Invoke: at(inv), Return: at(inv), Revision: rev, SHA: sha, Outcome: outcomeOK}
	}
	cases := []struct {
		name string
		ops  []casOp
		want string
	}{
		{"sequential", []casOp{cas(0, 1, "a", 0, 10, outcomeOK, 2), cas(1, 2, "b", 20, 30, outcomeOK, 3), read(40, 3, "b")}, "Ok"},
		{"concurrent: one wins, one refused", []casOp{cas(0, 1, "a", 0, 30, outcomeOK, 2), cas(1, 1, "b", 5, 25, outcomeMismatch, 0)}, "Ok"},
		{"both win the same revision", []casOp{cas(0, 1, "a", 0, 30, outcomeOK, 2), cas(1, 1, "b", 5, 25, outcomeOK, 2)}, "Illegal"},
		{"refused although expectation held", []casOp{cas(0, 1, "a", 0, 10, outcomeMismatch, 0), read(20, 1, "s1")}, "Illegal"},
		{"unknown that happened", []casOp{cas(0, 1, "a", 0, 10, outcomeUnknown, 0), read(50, 2, "a")}, "Ok"},
		{"unknown that did not happen", []casOp{cas(0, 1, "a", 0, 10, outcomeUnknown, 0), cas(1, 1, "b", 20, 30, outcomeOK, 2), read(50, 2, "b")}, "Ok"},
		{"lost acknowledged write", []casOp{cas(0, 1, "a", 0, 10, outcomeOK, 2), read(50, 1, "s1")}, "Illegal"},
		{"retry of current content is a no-op", []casOp{cas(0, 1, "a", 0, 10, outcomeOK, 2), cas(0, 1, "a", 20, 30, outcomeOK, 2)}, "Ok"},
		{"stale read after acknowledged write", []casOp{cas(0, 1, "a", 0, 10, outcomeOK, 2), read(20, 1, "s1")}, "Illegal"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, _ := checkCAS(init, c.ops, 10*time.Second)
			if r.Linearizable != c.want {
				t.Fatalf("linearizable = %s, want %s", r.Linearizable, c.want)
			}
		})
	}
}

func TestCheckPointerHistory(t *testing.T) {
	init := pointer{Rev: 1, SHA: "s1"}
	ops := []casOp{
		{SHA: "a", Outcome: outcomeOK, Revision: 2},
		{SHA: "b", Outcome: outcomeUnknown},
		{SHA: "c", Outcome: outcomeOK, Revision: 4},
	}
	got := checkPointerHistory(init, ops, map[uint64]string{1: "s1", 2: "a", 3: "b", 4: "x"})
	if len(got) != 2 || !strings.Contains(got[0], "acknowledged as revision 4") || !strings.Contains(got[1], "no client pushed") {
		t.Fatalf("problems = %q", got)
	}
	if got := checkPointerHistory(init, ops[:2], map[uint64]string{1: "s1", 2: "a"}); len(got) != 0 {
		t.Fatalf("clean history reported %q", got)
	}
}

func TestActiveSpansAndOverlaps(t *testing.T) {
	s := func(node string, send int, role, epoch string) roleSample {
		return roleSample{Node: node, Send: at(send), Recv: at(send + 5), OK: role != "", Role: role, Epoch: epoch}
	}
	samples := []roleSample{
		s("a", 0, "active", "1.2"), s("a", 100, "active", "1.2"), s("a", 200, "active", "1.2"), s("a", 300, "", ""),
		s("b", 0, "standby", "1.2"), s("b", 100, "standby", "1.2"), s("b", 150, "active", "1.3"), s("b", 250, "active", "1.3"),
		s("c", 0, "active", "1.2"), // c claims a's epoch: never allowed
	}
	spans := activeSpans(samples)
	if len(spans) != 3 {
		t.Fatalf("spans = %+v", spans)
	}
	if sp := spans[0]; sp.Node != "a" || !sp.From.Equal(at(5)) || !sp.To.Equal(at(200)) {
		t.Fatalf("a's span = %+v; want certain from 5 ms to 200 ms", sp)
	}
	os := activeOverlaps(spans)
	var sawAB, sawSame bool
	for _, o := range os {
		if o.A == "a" && o.B == "b" {
			sawAB = o.Length == 45*time.Millisecond && !o.SameEpoch
		}
		if o.SameEpoch && o.EpochA == "1.2" {
			sawSame = true
		}
	}
	if !sawAB || !sawSame {
		t.Fatalf("overlaps = %+v; want a/b for 45ms and a same-epoch claim", os)
	}
	// Spans that only touch within sampling uncertainty are no overlap.
	clean := activeSpans([]roleSample{
		s("a", 0, "active", "1.2"), s("a", 100, "standby", "1.2"),
		s("b", 100, "active", "1.3"), s("b", 200, "active", "1.3"),
	})
	if o := activeOverlaps(clean); len(o) != 0 {
		t.Fatalf("overlaps without certain overlap: %+v", o)
	}
}

func TestFailoverTimeAndSummary(t *testing.T) {
	samples := []roleSample{
		{Node: "a", Recv: at(100), OK: true, Role: "active", Epoch: "1.2"},
		{Node: "b", Recv: at(900), OK: true, Role: "active", Epoch: "1.3"},
		{Node: "b", Recv: at(700), OK: true, Role: "standby", Epoch: "1.2"},
	}
	d, ok := failoverTime(samples, "1.2", at(50), at(5000))
	if !ok || d != 850*time.Millisecond {
		t.Fatalf("failover = %s %v; want 850ms", d, ok)
	}
	if _, ok := failoverTime(samples[1:], "1.3", at(50), at(5000)); ok {
		t.Fatal("found a failover with no new epoch")
	}
	// The old Active carried on after the fault: no failover in a window
	// that ends before b's later takeover, but the old epoch active again.
	if _, ok := failoverTime(samples, "1.2", at(50), at(800)); ok {
		t.Fatal("a takeover after the window's end counted as this fault's failover")
	}
	if !activeIn(samples, "1.2", at(50), at(800)) || activeIn(samples, "1.2", at(200), at(800)) {
		t.Fatal("activeIn: want the old epoch's Active at 100ms and none after 200ms")
	}
	// Round 1's two faults start microseconds apart; round 2 starts at 1 s.
	evs := []faultEvent{{Round: 1, Start: at(0)}, {Round: 1, Start: at(0).Add(20 * time.Microsecond)}, {Round: 3, Start: at(3000)}, {Round: 2, Start: at(1000)}}
	if got := nextRoundStart(evs, 1); !got.Equal(at(1000)) {
		t.Fatalf("nextRoundStart(1) = %v, want round 2's start", got)
	}
	if got := nextRoundStart(evs, 3); !got.IsZero() {
		t.Fatalf("nextRoundStart after the last = %v, want zero", got)
	}
	st := summarize([]time.Duration{3, 1, 2, 100})
	if st.Min != 1 || st.Median != 2 || st.P99 != 100 || st.Max != 100 || st.N != 4 {
		t.Fatalf("summary = %+v", st)
	}
}

func TestScheduleIsReplayable(t *testing.T) {
	a := newSchedule(7, 50, "witness", true, 3*time.Second)
	b := newSchedule(7, 50, "witness", true, 3*time.Second)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different schedules")
	}
	if reflect.DeepEqual(a, newSchedule(8, 50, "witness", true, 3*time.Second)) {
		t.Fatal("different seeds, same schedule")
	}
	kinds := map[string]bool{}
	for _, r := range a {
		for _, f := range r.Faults {
			kinds[f.Kind] = true
			if f.Kind == faultPauseShort && f.Hold >= electionTimeout {
				t.Fatalf("short pause of %s is not shorter than the election timeout", f.Hold)
			}
			if f.Kind == faultPauseLong && f.Hold <= electionTimeout {
				t.Fatalf("long pause of %s is not longer than the election timeout", f.Hold)
			}
		}
	}
	if len(kinds) < 10 {
		t.Fatalf("50 rounds drew only %d kinds: %v", len(kinds), kinds)
	}
	p := newSchedule(7, 5, "pair", false, 3*time.Second)
	last := p[len(p)-1].Faults[0]
	if last.Kind != faultPairLong || last.Hold <= 3*time.Second {
		t.Fatalf("pair schedule ends with %+v; want a partition longer than override_after", last)
	}
	for _, r := range p[:len(p)-1] {
		for _, f := range r.Faults {
			if f.Kind == faultPairLong || f.Kind == faultPartition || f.Kind == faultIsolateActive {
				t.Fatalf("pair schedule has %s before its last round", f.Kind)
			}
			if f.Kind == faultPairShort && f.Hold >= 3*time.Second {
				t.Fatalf("under-override partition held %s", f.Hold)
			}
		}
	}
}

// TestSupersededPushesLeaveTheCheck: in pair mode a push acknowledged by
// the side that loses the heal is recorded as superseded and never
// applied. Returned during the split it is left out of the register
// checks; returned before any split it is a lost write.
func TestSupersededPushesLeaveTheCheck(t *testing.T) {
	base := func(ret int) *history {
		return &history{
			Mode: "pair", InitialPtr: pointer{Rev: 1, SHA: "s1"}, FinalPtr: pointer{Rev: 2, SHA: "a"},
			PtrHistory: map[uint64]string{1: "s1", 2: "a"},
			Start:      at(0), End: at(100), SplitAt: at(40),
			CAS: []casOp{
				{Client: 0, Expect: 1, SHA: "a", Invoke: at(0), Return: at(10), Outcome: outcomeOK, Revision: 2},
				{Client: 1, Expect: 1, SHA: "loser", Invoke: at(35), Return: at(ret), Outcome: outcomeOK, Revision: 2},
			},
			Superseded: map[string]bool{"loser": true},
		}
	}
	rep := analyze(base(60), 10*time.Second)
	if rep.CAS.Linearizable != "Ok" || len(rep.CAS.HistoryProblems) != 0 || rep.CAS.SupersededByHeal != 1 {
		t.Fatalf("split-era superseded push: %+v", rep.CAS)
	}
	for _, p := range rep.Problems {
		if strings.Contains(p, "superseded") || strings.Contains(p, "linearizable") {
			t.Fatalf("split-era superseded push reported: %s", p)
		}
	}
	rep = analyze(base(20), 10*time.Second)
	found := false
	for _, p := range rep.Problems {
		found = found || strings.Contains(p, "before any split")
	}
	if !found {
		t.Fatalf("a push superseded although acknowledged before the split was not reported: %q", rep.Problems)
	}
	// Without the heal's record the same push is a violation.
	h := base(60)
	h.Superseded = nil
	if rep := analyze(h, 10*time.Second); rep.CAS.Linearizable != "Illegal" && len(rep.CAS.HistoryProblems) == 0 {
		t.Fatalf("an unrecorded conflicting push passed: %+v", rep.CAS)
	}
}

// -kinds: a schedule of the given kinds alone, one fault a round, the same
// for a seed.
func TestScheduleOfKinds(t *testing.T) {
	kinds := []string{faultIsolateActive, faultKillActive}
	a := newScheduleOf(3, 40, kinds, 3*time.Second)
	if !reflect.DeepEqual(a, newScheduleOf(3, 40, kinds, 3*time.Second)) {
		t.Fatal("same seed, different schedules")
	}
	seen := map[string]int{}
	for _, r := range a {
		if len(r.Faults) != 1 {
			t.Fatalf("round %d has %d faults, want 1", r.Index, len(r.Faults))
		}
		seen[r.Faults[0].Kind]++
	}
	if len(seen) != 2 || seen[faultIsolateActive] == 0 || seen[faultKillActive] == 0 {
		t.Fatalf("kinds drawn %v, want both and only %v", seen, kinds)
	}
}
