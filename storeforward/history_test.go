package storeforward

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/clock/clocktest"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/role/roletest"
)

type enqueueCall struct {
	target, id string
	payload    HistoryPayload
}

// recordingEnqueuer records calls and fails while fail is set; next, when
// non-nil, does the real enqueue.
type recordingEnqueuer struct {
	mu    sync.Mutex
	calls []enqueueCall
	fail  bool
	next  MessageEnqueuer
}

func (r *recordingEnqueuer) Enqueue(ctx context.Context, target string, payload []byte, id string, headers []Header) (EnqueueResult, error) {
	var p HistoryPayload
	if err := json.Unmarshal(payload, &p); err != nil {
		return EnqueueResult{}, err
	}
	r.mu.Lock()
	r.calls = append(r.calls, enqueueCall{target: target, id: id, payload: p})
	fail := r.fail
	r.mu.Unlock()
	if fail {
		return EnqueueResult{}, ErrUnavailable
	}
	if r.next != nil {
		return r.next.Enqueue(ctx, target, payload, id, headers)
	}
	return EnqueueResult{ID: id}, nil
}

func (r *recordingEnqueuer) snapshot() []enqueueCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]enqueueCall(nil), r.calls...)
}

func startHistory(t *testing.T, opts HistoryOptions) *HistoryForwarder {
	t.Helper()
	h, err := NewHistoryForwarder(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

var t0 = time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)

func TestHistoryBatchesBySizeAndDelayIntoTheStore(t *testing.T) {
	f := newFSM(t, true)
	e, err := NewEnqueuer(EnqueuerOptions{Proposer: &applyProposer{f: f}, Targets: StaticTargets{"historian": {Name: "historian", URL: "http://x"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rec := &recordingEnqueuer{next: e}
	clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fwd := startHistory(t, HistoryOptions{Enqueuer: rec, Clock: clock, Rules: []HistoryRule{{Name: "all", Target: "historian", MaxBatch: 3, MaxBatchDelay: time.Minute}}})
	for i := 0; i < 7; i++ {
		if !fwd.Offer(TagUpdate{Instance: "Pump1", Attribute: "Speed", Value: float64(i), Quality: "good", Timestamp: t0.Add(time.Duration(i) * time.Second)}) {
			t.Fatal("offer dropped")
		}
	}
	testwait.For(t, 5*time.Second, "two full batches", func() bool { return len(rec.snapshot()) == 2 })
	testwait.For(t, 5*time.Second, "the 7th value taken in", func() bool { return len(fwd.updates) == 0 })
	if n := len(rec.snapshot()); n != 2 {
		t.Fatalf("%d batches before the delay passed", n)
	}
	testwait.For(t, 5*time.Second, "the partial batch", func() bool {
		clock.Advance(time.Minute)
		return len(rec.snapshot()) == 3
	})

	calls := rec.snapshot()
	sizes := []int{3, 3, 1}
	for i, c := range calls {
		if c.target != "historian" || c.payload.Rule != "all" || len(c.payload.Values) != sizes[i] {
			t.Fatalf("call %d: %+v", i, c)
		}
	}
	v := calls[1].payload.Values[0]
	if v.Instance != "Pump1" || v.Attribute != "Speed" || v.Value != float64(3) || v.Quality != "good" || !v.Timestamp.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("value %+v", v)
	}
	// The recorder sees a call before the store commits it.
	testwait.For(t, 5*time.Second, "3 batches stored", func() bool {
		st, _ := f.SFStats()
		return st["historian"].Pending == 3
	})

}

func TestHistorySelectionAndDeadband(t *testing.T) {
	rec := &recordingEnqueuer{}
	clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fwd := startHistory(t, HistoryOptions{Enqueuer: rec, Clock: clock, Rules: []HistoryRule{{
		Name: "speed", Target: "up", Deadband: 1.0, MaxBatch: 100, MaxBatchDelay: time.Minute,
		Select: []HistorySelector{{Instance: "Pump1", Attributes: []string{"Speed"}}, {Instance: "Valve"}},
	}}})
	updates := []struct {
		u    TagUpdate
		kept bool
	}{
		{TagUpdate{Instance: "Pump1", Attribute: "Speed", Value: 10.0, Quality: "good"}, true},
		{TagUpdate{Instance: "Pump1", Attribute: "Speed", Value: 10.5, Quality: "good"}, false}, // within deadband
		{TagUpdate{Instance: "Pump1", Attribute: "Speed", Value: 11.6, Quality: "good"}, true},
		{TagUpdate{Instance: "Pump1", Attribute: "Speed", Value: 11.7, Quality: "bad"}, true}, // quality changed
		{TagUpdate{Instance: "Pump1", Attribute: "Temp", Value: 50, Quality: "good"}, false},  // attribute not selected
		{TagUpdate{Instance: "Pump2", Attribute: "Speed", Value: 1, Quality: "good"}, false},  // instance not selected
		{TagUpdate{Instance: "Valve", Attribute: "Open", Value: true, Quality: "good"}, true}, // whole instance
		{TagUpdate{Instance: "Valve", Attribute: "Open", Value: true, Quality: "good"}, true}, // not numeric: no deadband
		{TagUpdate{Instance: "Valve", Attribute: "Pos", Value: math.NaN(), Quality: "bad"}, true},
	}
	want := 0
	for _, u := range updates {
		fwd.Offer(u.u)
		if u.kept {
			want++
		}
	}
	// Wait until the forwarder took everything in, then let the delay pass.
	testwait.For(t, 5*time.Second, "updates taken in", func() bool { return len(fwd.updates) == 0 })
	var calls []enqueueCall
	testwait.For(t, 5*time.Second, "the batch", func() bool {

		clock.Advance(time.Minute)
		calls = rec.snapshot()
		return len(calls) == 1
	})

	if got := len(calls[0].payload.Values); got != want {
		t.Fatalf("%d values forwarded, want %d: %+v", got, want, calls[0].payload.Values)
	}
	if last := calls[0].payload.Values[want-1]; last.Value != "NaN" {
		t.Fatalf("NaN forwarded as %v", last.Value)
	}
}

func TestHistoryRetriesFailedBatchWithSameID(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingEnqueuer{fail: true}
	clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fwd := startHistory(t, HistoryOptions{Enqueuer: rec, Clock: clock, Jitter: func() float64 { return 0.5 }, Metrics: metrics,
		Rules: []HistoryRule{{Name: "r", Target: "up", MaxBatch: 2}}})
	fwd.Offer(TagUpdate{Instance: "a", Attribute: "x", Value: 1, Timestamp: t0})
	fwd.Offer(TagUpdate{Instance: "a", Attribute: "x", Value: 2, Timestamp: t0})
	testwait.For(t, 5*time.Second, "first attempt", func() bool { return len(rec.snapshot()) == 1 })
	testwait.For(t, 5*time.Second, "the waiting gauge", func() bool {
		return gathered(t, reg, "scadad_history_values_waiting", "") == 2
	})

	rec.mu.Lock()
	rec.fail = false
	rec.mu.Unlock()
	retryDue := clock.Now().Add(100 * time.Millisecond) // floor, jitter 0.5 = none
	testwait.For(t, 5*time.Second, "the retry timer", func() bool { return clock.WaitingAt(retryDue) })
	if n := len(rec.snapshot()); n != 1 {
		t.Fatalf("%d attempts before the retry delay", n)
	}
	clock.Advance(75 * time.Millisecond)
	if n := len(rec.snapshot()); n != 1 {
		t.Fatalf("retried before the backoff delay: %d attempts", n)
	}
	clock.Advance(25 * time.Millisecond)
	testwait.For(t, 5*time.Second, "retry", func() bool { return len(rec.snapshot()) == 2 })
	calls := rec.snapshot()
	if calls[0].id != calls[1].id || calls[0].id == "" {
		t.Fatalf("retry used id %q after %q", calls[1].id, calls[0].id)
	}
	if fwd.Sent() != 1 {
		t.Fatalf("sent = %d", fwd.Sent())
	}
	if got := gathered(t, reg, "scadad_history_values_waiting", ""); got != 0 {
		t.Fatalf("scadad_history_values_waiting = %v after the retry went through, want 0", got)
	}
}

// A batch over the target's payload limit goes in halves, down to single
// values; a value over the limit on its own is dropped and counted. Neither
// holds up what follows (the batch used to be retried every 10 s for ever,
// with nothing counted, while every later value queued behind it).
func TestHistorySplitsBatchesOverThePayloadLimit(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := newFSM(t, true)
	// About 115 bytes a value: four fit in 600, eight do not.
	e, err := NewEnqueuer(EnqueuerOptions{Proposer: &applyProposer{f: f},
		Targets: StaticTargets{"historian": {Name: "historian", URL: "http://x", MaxPayloadBytes: 600}}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	fwd := startHistory(t, HistoryOptions{Enqueuer: e, Metrics: metrics, Clock: clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		Rules: []HistoryRule{{Name: "r", Target: "historian", MaxBatch: 8, MaxBatchDelay: time.Hour}}})
	const base = int64(1) << 60 // not exact as a float64: the halves must keep it as written
	var want []string
	for i := range int64(16) {
		u := TagUpdate{Instance: "Pump1", Attribute: "Speed", Value: base + i, Quality: "good", Timestamp: t0}
		if i == 10 {
			u.Value = strings.Repeat("x", 700) // alone over the limit
		} else {
			want = append(want, strconv.FormatInt(base+i, 10))
		}
		offerAll(t, fwd, u)
	}
	testwait.For(t, 5*time.Second, "the oversized value dropped", func() bool { return fwd.Dropped() == 1 })
	var got []string
	testwait.For(t, 5*time.Second, "every other value stored", func() bool {
		msgs, err := f.SFPending("historian", 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, m := range msgs {
			dec := json.NewDecoder(bytes.NewReader(m.Payload))
			dec.UseNumber()
			var p HistoryPayload
			if err := dec.Decode(&p); err != nil {
				t.Fatalf("stored payload %q: %v", m.Payload, err)
			}
			if len(m.Payload) > 600 {
				t.Fatalf("stored a %d-byte payload over the 600-byte limit", len(m.Payload))
			}
			for _, v := range p.Values {
				got = append(got, fmt.Sprint(v.Value))
			}
		}
		return len(got) >= len(want)
	})

	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("stored values\n%v\nwant (in order, exactly as offered)\n%v", got, want)
	}
	if got := gathered(t, reg, "scadad_history_values_dropped_total", dropTooLarge); got != 1 {
		t.Fatalf("scadad_history_values_dropped_total{reason=too_large} = %v, want 1", got)
	}
	if got := gathered(t, reg, "scadad_history_values_waiting", ""); got != 0 {
		t.Fatalf("scadad_history_values_waiting = %v, want 0", got)
	}
}

func TestHistoryRejectsBadRules(t *testing.T) {
	cases := []HistoryOptions{
		{},
		{Enqueuer: &recordingEnqueuer{}, Rules: []HistoryRule{{Name: "", Target: "t"}}},
		{Enqueuer: &recordingEnqueuer{}, Rules: []HistoryRule{{Name: "a", Target: "t"}, {Name: "a", Target: "t"}}},
		{Enqueuer: &recordingEnqueuer{}, Rules: []HistoryRule{{Name: "a", Target: "t", Deadband: -1}}},
	}
	for i, c := range cases {
		if _, err := NewHistoryForwarder(c); err == nil {
			t.Errorf("case %d accepted", i)
		}
	}
}

// offerAll offers the updates and waits until the forwarder has looked at
// every update offered so far.
func offerAll(t *testing.T, fwd *HistoryForwarder, us ...TagUpdate) {
	t.Helper()
	want := fwd.Taken() + uint64(len(us))
	for _, u := range us {
		if !fwd.Offer(u) {
			t.Fatal("offer dropped")
		}
	}
	testwait.For(t, 5*time.Second, "updates taken in", func() bool { return fwd.Taken() == want })
}

type sampled struct {
	attr  string
	value any
}

func sampledValues(c enqueueCall) []sampled {
	var out []sampled
	for _, v := range c.payload.Values {
		out = append(out, sampled{v.Instance + "." + v.Attribute, v.Value})
	}
	return out
}

func TestHistorySampleForwardsLatestValueEveryInterval(t *testing.T) {
	rec := &recordingEnqueuer{}
	clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	start := clock.Now()
	fwd := startHistory(t, HistoryOptions{Enqueuer: rec, Clock: clock, Rules: []HistoryRule{{
		Name: "cyclic", Target: "up", SampleInterval: time.Second, MaxBatch: 100, MaxBatchDelay: time.Millisecond,
		Select: []HistorySelector{{Instance: "Pump1"}},
	}}})
	offerAll(t, fwd,
		TagUpdate{Instance: "Pump1", Attribute: "Speed", Value: 1.0, Quality: "good", Timestamp: t0},
		TagUpdate{Instance: "Pump1", Attribute: "Speed", Value: 2.0, Quality: "good", Timestamp: t0.Add(time.Millisecond)},
		TagUpdate{Instance: "Pump2", Attribute: "Speed", Value: 9.0, Quality: "good", Timestamp: t0}, // not selected
		TagUpdate{Instance: "Pump1", Attribute: "Temp", Value: 50, Quality: "good", Timestamp: t0},
		TagUpdate{Instance: "Pump1", Attribute: "Speed", Value: 3.0, Quality: "good", Timestamp: t0.Add(2 * time.Millisecond)},
	)
	if n := len(rec.snapshot()); n != 0 {
		t.Fatalf("%d messages before the first sample", n)
	}
	tick := start.Add(time.Second)
	testwait.For(t, 5*time.Second, "the sample timer", func() bool { return clock.WaitingAt(tick) })
	clock.Advance(time.Second)
	testwait.For(t, 5*time.Second, "the batch timer", func() bool { return clock.WaitingAt(tick.Add(time.Millisecond)) })
	clock.Advance(time.Millisecond)
	testwait.For(t, 5*time.Second, "the first sample", func() bool { return len(rec.snapshot()) == 1 })

	// Unchanged values are sampled again: that is what sampling is for.
	tick = start.Add(2 * time.Second)
	testwait.For(t, 5*time.Second, "the second sample timer", func() bool { return clock.WaitingAt(tick) })
	clock.Advance(time.Second - time.Millisecond)
	testwait.For(t, 5*time.Second, "the batch timer", func() bool { return clock.WaitingAt(tick.Add(time.Millisecond)) })
	clock.Advance(time.Millisecond)
	testwait.For(t, 5*time.Second, "the second sample", func() bool { return len(rec.snapshot()) == 2 })

	calls := rec.snapshot()
	want := []sampled{{"Pump1.Speed", 3.0}, {"Pump1.Temp", float64(50)}} // JSON numbers decode as float64
	for i, c := range calls {
		got := sampledValues(c)
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("sample %d forwarded %v, want %v", i, got, want)
		}
		at := start.Add(time.Duration(i+1) * time.Second)
		for _, v := range c.payload.Values {
			if !v.SampledAt.Equal(at) {
				t.Fatalf("sample %d: sampled_at %s, want %s", i, v.SampledAt, at)
			}
		}
		if v := c.payload.Values[0]; !v.Timestamp.Equal(t0.Add(2 * time.Millisecond)) {
			t.Fatalf("sample %d: source timestamp %s, want the value's own", i, v.Timestamp)
		}
	}
	if calls[0].id == calls[1].id {
		t.Fatalf("two samples share message id %s (the second would be dropped as a duplicate)", calls[0].id)
	}
}

func TestHistorySampleDeadbandAndBatchLimit(t *testing.T) {
	cases := []struct {
		name     string
		deadband float64
		maxBatch int
		second   []TagUpdate // offered between the first and the second sample
		want     [][][]sampled
	}{{
		name: "batches split at max_batch", maxBatch: 2,
		want: [][][]sampled{
			{{{"P.a", 1.0}, {"P.b", 2.0}}, {{"P.c", 3.0}}},
			{{{"P.a", 1.0}, {"P.b", 2.0}}, {{"P.c", 3.0}}},
		},
	}, {
		name: "deadband holds back values that did not move", deadband: 1, maxBatch: 100,
		second: []TagUpdate{
			{Instance: "P", Attribute: "a", Value: 1.5, Quality: "good"}, // within the deadband
			{Instance: "P", Attribute: "b", Value: 3.5, Quality: "good"}, // outside it
		},
		want: [][][]sampled{
			{{{"P.a", 1.0}, {"P.b", 2.0}, {"P.c", 3.0}}},
			{{{"P.b", 3.5}}},
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordingEnqueuer{}
			clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			start := clock.Now()
			fwd := startHistory(t, HistoryOptions{Enqueuer: rec, Clock: clock, Rules: []HistoryRule{{
				Name: "r", Target: "up", SampleInterval: time.Second, Deadband: tc.deadband, MaxBatch: tc.maxBatch, MaxBatchDelay: time.Millisecond,
			}}})
			offerAll(t, fwd,
				TagUpdate{Instance: "P", Attribute: "a", Value: 1.0, Quality: "good"},
				TagUpdate{Instance: "P", Attribute: "b", Value: 2.0, Quality: "good"},
				TagUpdate{Instance: "P", Attribute: "c", Value: 3.0, Quality: "good"},
			)
			sent := 0
			for i, msgs := range tc.want {
				if i == 1 {
					offerAll(t, fwd, tc.second...)
				}
				tick := start.Add(time.Duration(i+1) * time.Second)
				testwait.For(t, 5*time.Second, "the sample timer", func() bool { return clock.WaitingAt(tick) })
				clock.Advance(tick.Sub(clock.Now()))
				if full := len(msgs) - 1; full > 0 {
					testwait.For(t, 5*time.Second, "full batches", func() bool { return len(rec.snapshot()) == sent+full })
				}
				testwait.For(t, 5*time.Second, "the batch timer", func() bool { return clock.WaitingAt(tick.Add(time.Millisecond)) })
				clock.Advance(time.Millisecond)
				sent += len(msgs)
				testwait.For(t, 5*time.Second, "the sample's messages", func() bool { return len(rec.snapshot()) == sent })
			}
			calls := rec.snapshot()
			k := 0
			for i, msgs := range tc.want {
				for j, want := range msgs {
					got := sampledValues(calls[k])
					k++
					if len(got) != len(want) {
						t.Fatalf("sample %d message %d: %v, want %v", i, j, got, want)
					}
					for n := range want {
						if got[n] != want[n] {
							t.Fatalf("sample %d message %d: %v, want %v", i, j, got, want)
						}
					}
				}
			}
		})
	}
}

func TestHistorySampleOnlyWhileActive(t *testing.T) {
	roles := role.NewBroadcaster(role.State{Role: role.Active, Voters: 2})
	rec, clock, fwd, advanceTo := startSampledOnce(t, roles)
	start := clock.Now().Add(-time.Second - time.Millisecond)

	// No longer Active: the next sample sends nothing and forgets the value.
	// (A sample would arm its batch timer instead of the next tick's.)
	roles.Publish(role.State{Role: role.Standby, Voters: 2})
	advanceTo(start.Add(2 * time.Second))
	testwait.For(t, 5*time.Second, "the 2 s tick done", func() bool { return clock.WaitingAt(start.Add(3 * time.Second)) })
	// Active again without a new value: still nothing to sample.
	roles.Publish(role.State{Role: role.Active, Voters: 2})
	advanceTo(start.Add(3 * time.Second))
	testwait.For(t, 5*time.Second, "the 3 s tick done", func() bool { return clock.WaitingAt(start.Add(4 * time.Second)) })
	// A fresh value is sampled at the next tick.
	offerAll(t, fwd, TagUpdate{Instance: "P", Attribute: "a", Value: 2.0, Quality: "good"})
	advanceTo(start.Add(4 * time.Second))
	advanceTo(start.Add(4*time.Second + time.Millisecond))
	testwait.For(t, 5*time.Second, "the sample after the new value", func() bool { return len(rec.snapshot()) == 2 })
	calls := rec.snapshot()
	if got := sampledValues(calls[1]); len(got) != 1 || got[0] != (sampled{"P.a", 2.0}) {
		t.Fatalf("after regaining the Active role forwarded %v, want only the fresh value", got)
	}
	if !calls[1].payload.Values[0].SampledAt.Equal(start.Add(4 * time.Second)) {
		t.Fatalf("sampled at %s, want the 4 s tick (ticks 2 s and 3 s had nothing to send)", calls[1].payload.Values[0].SampledAt)
	}
}

func TestHistoryDropsAreCountedAndLogged(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	// Not running: the intake of two fills and stays full.
	fwd, err := NewHistoryForwarder(HistoryOptions{Enqueuer: &recordingEnqueuer{}, Buffer: 2, Metrics: metrics, Clock: clock,
		Logger: zerolog.New(&logs), Rules: []HistoryRule{{Name: "r", Target: "up"}}})
	if err != nil {
		t.Fatal(err)
	}
	offer := func(n int) (accepted int) {
		for range n {
			if fwd.Offer(TagUpdate{Instance: "P", Attribute: "a", Value: 1.0}) {
				accepted++
			}
		}
		return accepted
	}
	if got := offer(5); got != 2 {
		t.Fatalf("%d of 5 offers accepted by an intake of 2", got)
	}
	clock.Advance(dropLogEvery - time.Millisecond)
	offer(1) // within the log interval: counted, not logged
	clock.Advance(time.Millisecond)
	offer(1)
	if fwd.Dropped() != 5 {
		t.Fatalf("Dropped() = %d, want 5", fwd.Dropped())
	}
	if got := gathered(t, reg, "scadad_history_values_dropped_total", dropBufferFull); got != 5 {
		t.Fatalf("scadad_history_values_dropped_total{reason=%q} = %v, want 5", dropBufferFull, got)
	}
	type dropLog struct {
		Dropped      uint64 `json:"dropped"`
		DroppedTotal uint64 `json:"dropped_total"`
		Reason       string `json:"reason"`
	}
	var lines []dropLog
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var e dropLog
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		lines = append(lines, e)
	}
	// The first drop is logged at once; the next three wait for the
	// interval and are reported together with the fifth.
	if len(lines) != 2 || lines[0].Dropped != 1 || lines[1].Dropped != 4 || lines[1].DroppedTotal != 5 || lines[1].Reason != dropBufferFull {
		t.Fatalf("drop log lines %+v, want dropped 1 then 4 (total 5)", lines)
	}
}

func TestHistorySentMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingEnqueuer{}
	fwd := startHistory(t, HistoryOptions{Enqueuer: rec, Metrics: metrics, Clock: clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		Rules: []HistoryRule{{Name: "pumps", Target: "up", MaxBatch: 3}}})
	offerAll(t, fwd,
		TagUpdate{Instance: "P", Attribute: "a", Value: 1.0},
		TagUpdate{Instance: "P", Attribute: "a", Value: 2.0},
		TagUpdate{Instance: "P", Attribute: "a", Value: 3.0},
	)
	testwait.For(t, 5*time.Second, "the full batch", func() bool { return fwd.Sent() == 1 })
	if got := gathered(t, reg, "scadad_history_messages_total", "pumps"); got != 1 {
		t.Fatalf("scadad_history_messages_total{rule=pumps} = %v, want 1", got)
	}
	if got := gathered(t, reg, "scadad_history_values_total", "pumps"); got != 3 {
		t.Fatalf("scadad_history_values_total{rule=pumps} = %v, want 3", got)
	}
}

// A forwarder that stops (a deploy replaced it, the node hands over or
// stops) enqueues the values it still batches, once, instead of dropping
// them; what it cannot enqueue in time is dropped and counted.
func TestHistoryStopFlushesWhatIsBatched(t *testing.T) {
	for _, tc := range []struct {
		name       string
		fail       bool
		wantValues int
		wantDrops  float64
	}{
		{"the buffer takes it", false, 3, 0},
		{"the buffer refuses it", true, 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			metrics, err := NewMetrics(reg, nil)
			if err != nil {
				t.Fatal(err)
			}
			rec := &recordingEnqueuer{fail: tc.fail}
			h, err := NewHistoryForwarder(HistoryOptions{Enqueuer: rec, Clock: clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), Metrics: metrics,
				Rules: []HistoryRule{{Name: "r", Target: "up", MaxBatch: 100, MaxBatchDelay: time.Hour}}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = h.Run(ctx) }()
			offerAll(t, h,
				TagUpdate{Instance: "P", Attribute: "a", Value: 1.0},
				TagUpdate{Instance: "P", Attribute: "a", Value: 2.0},
				TagUpdate{Instance: "P", Attribute: "a", Value: 3.0},
			)
			if n := len(rec.snapshot()); n != 0 {
				t.Fatalf("%d enqueues before the batch delay or the stop", n)
			}
			cancel()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Run still flushing 5 s after its context ended")
			}
			values := 0
			if !tc.fail {
				for _, c := range rec.snapshot() {
					values += len(c.payload.Values)
				}
			}
			if values != tc.wantValues {
				t.Fatalf("%d values enqueued at the stop, want %d", values, tc.wantValues)
			}
			if got := gathered(t, reg, "scadad_history_values_dropped_total", dropStopped); got != tc.wantDrops {
				t.Fatalf("dropped{reason=stopped} = %v, want %v", got, tc.wantDrops)
			}
		})
	}
}

// Updates offered but not yet taken in when the forwarder stops go with
// the final flush too.
func TestHistoryStopTakesOfferedUpdates(t *testing.T) {
	rec := &recordingEnqueuer{}
	h, err := NewHistoryForwarder(HistoryOptions{Enqueuer: rec, Clock: clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		Rules: []HistoryRule{{Name: "r", Target: "up", MaxBatch: 100, MaxBatchDelay: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if !h.Offer(TagUpdate{Instance: "P", Attribute: "a", Value: float64(i)}) {
			t.Fatal("offer refused")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // stopped before it took anything in
	if err := h.Run(ctx); err != nil {
		t.Fatal(err)
	}
	values := 0
	for _, c := range rec.snapshot() {
		values += len(c.payload.Values)
	}
	if values != 3 {
		t.Fatalf("%d of 3 offered values enqueued by a forwarder stopped before it took them in", values)
	}
}

// A sampling rule keeps its values through a moment in which the Active's
// quorum confirmation is late (the Active role is not lost, so nothing
// replays the values afterwards): an attribute that does not change would
// otherwise drop out of every later sample.
func TestHistorySampleKeepsValuesThroughALateConfirmation(t *testing.T) {
	roles := roletest.New(role.State{Role: role.Active, Voters: 2})
	rec, clock, _, advanceTo := startSampledOnce(t, roles)
	start := clock.Now().Add(-time.Second - time.Millisecond)

	roles.Late()
	advanceTo(start.Add(2 * time.Second))
	testwait.For(t, 5*time.Second, "the 2 s tick looking at the role", func() bool { return roles.Asked() > 0 })
	roles.Confirmed()
	// Run the forwarder's timers (a batch deadline after a sample, the
	// next tick) up to the 3 s tick's batch.
	steps := []time.Time{start.Add(2*time.Second + time.Millisecond), start.Add(3 * time.Second), start.Add(3*time.Second + time.Millisecond)}
	for len(steps) > 0 && !clock.WaitingAt(start.Add(4*time.Second)) {
		testwait.For(t, 5*time.Second, "the next timer", func() bool {
			for _, at := range steps {
				if clock.WaitingAt(at) {
					return true
				}
			}
			return clock.WaitingAt(start.Add(4 * time.Second))
		})
		for i, at := range steps {
			if clock.WaitingAt(at) {
				clock.Advance(at.Sub(clock.Now()))
				steps = steps[i+1:]
				break
			}
		}
	}
	testwait.For(t, 5*time.Second, "the 3 s tick done", func() bool { return clock.WaitingAt(start.Add(4 * time.Second)) })
	var at3 bool
	calls := rec.snapshot()
	for _, c := range calls[1:] {
		for _, v := range c.payload.Values {
			if v.Instance+"."+v.Attribute == "P.a" && v.SampledAt.Equal(start.Add(3*time.Second)) {
				at3 = true
			}
		}
	}
	if !at3 {
		t.Fatalf("after a late confirmation at the 2 s tick, %d more batches and none sampled P.a at 3 s: the value was forgotten", len(calls)-1)
	}
}

// startSampledOnce starts a forwarder with one rule sampling every second
// on a fake clock, following roles, offers it P.a = 1 and runs the clock
// to the first sample's batch (1 s and 1 ms in), which it waits for. It
// returns what advanceTo(at) needs: the clock run to at once a timer
// waits there.
func startSampledOnce(t *testing.T, roles CurrentRole) (*recordingEnqueuer, *clocktest.Fake, *HistoryForwarder, func(time.Time)) {
	t.Helper()
	rec := &recordingEnqueuer{}
	clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	start := clock.Now()
	fwd := startHistory(t, HistoryOptions{Enqueuer: rec, Clock: clock, Roles: roles, Rules: []HistoryRule{{
		Name: "r", Target: "up", SampleInterval: time.Second, MaxBatch: 100, MaxBatchDelay: time.Millisecond,
	}}})
	offerAll(t, fwd, TagUpdate{Instance: "P", Attribute: "a", Value: 1.0, Quality: "good"})
	advanceTo := func(at time.Time) {
		t.Helper()
		testwait.For(t, 5*time.Second, "the timer", func() bool { return clock.WaitingAt(at) })
		clock.Advance(at.Sub(clock.Now()))
	}
	advanceTo(start.Add(time.Second))
	advanceTo(start.Add(time.Second + time.Millisecond))
	testwait.For(t, 5*time.Second, "the first sample", func() bool { return len(rec.snapshot()) == 1 })
	return rec, clock, fwd, advanceTo
}
