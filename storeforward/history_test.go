package storeforward

import (
	"context"
	"encoding/json"
	"math"
	"sync"
	"testing"
	"time"
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
	clock := newFakeClock()
	fwd := startHistory(t, HistoryOptions{Enqueuer: rec, Clock: clock, Rules: []HistoryRule{{Name: "all", Target: "historian", MaxBatch: 3, MaxBatchDelay: time.Minute}}})
	for i := 0; i < 7; i++ {
		if !fwd.Offer(TagUpdate{Instance: "Pump1", Attribute: "Speed", Value: float64(i), Quality: "good", Timestamp: t0.Add(time.Duration(i) * time.Second)}) {
			t.Fatal("offer dropped")
		}
	}
	waitFor(t, "two full batches", 5*time.Second, func() bool { return len(rec.snapshot()) == 2 })
	waitFor(t, "the 7th value taken in", 5*time.Second, func() bool { return len(fwd.updates) == 0 })
	if n := len(rec.snapshot()); n != 2 {
		t.Fatalf("%d batches before the delay passed", n)
	}
	waitFor(t, "the partial batch", 5*time.Second, func() bool {
		clock.Advance(time.Minute) // the 7th value's batch delay passes
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
	waitFor(t, "3 batches stored", 5*time.Second, func() bool {
		st, _ := f.SFStats()
		return st["historian"].Pending == 3
	})
}

func TestHistorySelectionAndDeadband(t *testing.T) {
	rec := &recordingEnqueuer{}
	clock := newFakeClock()
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
	waitFor(t, "updates taken in", 5*time.Second, func() bool { return len(fwd.updates) == 0 })
	var calls []enqueueCall
	waitFor(t, "the batch", 5*time.Second, func() bool {
		// The last update may still be in the loop's hands; advancing
		// again is harmless.
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
	rec := &recordingEnqueuer{fail: true}
	clock := newFakeClock()
	fwd := startHistory(t, HistoryOptions{Enqueuer: rec, Clock: clock, Jitter: func() float64 { return 0.5 },
		Rules: []HistoryRule{{Name: "r", Target: "up", MaxBatch: 2}}})
	fwd.Offer(TagUpdate{Instance: "a", Attribute: "x", Value: 1, Timestamp: t0})
	fwd.Offer(TagUpdate{Instance: "a", Attribute: "x", Value: 2, Timestamp: t0})
	waitFor(t, "first attempt", 5*time.Second, func() bool { return len(rec.snapshot()) == 1 })
	rec.mu.Lock()
	rec.fail = false
	rec.mu.Unlock()
	retryDue := clock.Now().Add(100 * time.Millisecond) // floor, jitter 0.5 = none
	waitFor(t, "the retry timer", 5*time.Second, func() bool { return clock.waitingAt(retryDue) })
	if n := len(rec.snapshot()); n != 1 {
		t.Fatalf("%d attempts before the retry delay", n)
	}
	clock.Advance(75 * time.Millisecond)
	if n := len(rec.snapshot()); n != 1 {
		t.Fatalf("retried before the backoff delay: %d attempts", n)
	}
	clock.Advance(25 * time.Millisecond)
	waitFor(t, "retry", 5*time.Second, func() bool { return len(rec.snapshot()) == 2 })
	calls := rec.snapshot()
	if calls[0].id != calls[1].id || calls[0].id == "" {
		t.Fatalf("retry used id %q after %q", calls[1].id, calls[0].id)
	}
	if fwd.Sent() != 1 {
		t.Fatalf("sent = %d", fwd.Sent())
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
