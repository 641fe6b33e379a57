package storeforward

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/clock/clocktest"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/role/roletest"
)

func TestDeliveryFIFOWithHeadersAndBatchedRemoval(t *testing.T) {
	const n = 60
	var (
		s1, s2 *sink
	)
	// Hold the first SFDelivered until the sinks have every message, so
	// the rest must be removed together in later, bigger commands.
	release := make(chan struct{})
	var blockedMu sync.Mutex
	blocked := map[string]bool{} // target (id prefix) → first removal held
	h := newHarness(t, role.State{Role: role.Standby})
	h.p.before = func(ctx context.Context, cmd *fsmpb.Command) error {
		d := cmd.GetSfDelivered()
		if d == nil {
			return nil
		}
		prefix, _, _ := strings.Cut(d.Ids[0], "-")
		blockedMu.Lock()
		first := !blocked[prefix]
		blocked[prefix] = true
		blockedMu.Unlock()
		if first {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	s1 = newSink(t, h.roles, nil)
	s2 = newSink(t, h.roles, nil)
	t1 := fastTarget("one", s1.srv.URL+"/in")
	t1.Headers = map[string]string{"Authorization": "Bearer t"}
	if err := h.d.SetTargets([]Target{t1, fastTarget("two", s2.srv.URL)}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := h.e.Enqueue(context.Background(), "one", []byte(fmt.Sprint("a", i)), fmt.Sprintf("one-%02d", i), []Header{{Key: "Content-Type", Value: "text/plain"}}); err != nil {
			t.Fatal(err)
		}
		h.enqueue(t, "two", fmt.Sprintf("two-%02d", i), fmt.Sprint("b", i))
	}
	h.roles.Publish(activeState(2, 7))
	testwait.For(t, 10*time.Second, "every message at the sinks", func() bool {
		return len(s1.requests()) >= n && len(s2.requests()) >= n
	})

	close(release)
	testwait.For(t, 10*time.Second, "removal of every delivered message", func() bool {
		return h.stats(t, "one").Pending == 0 && h.stats(t, "two").Pending == 0
	})

	for name, s := range map[string]*sink{"one": s1, "two": s2} {
		got := s.requests()
		if len(got) != n {
			t.Fatalf("%s: %d requests, want %d (each once)", name, len(got), n)
		}
		for i, r := range got {
			if want := fmt.Sprintf("%s-%02d", name, i); r.ID != want {
				t.Fatalf("%s: request %d has id %q, want %q (FIFO)", name, i, r.ID, want)
			}
			if r.Epoch != "2.7" {
				t.Fatalf("%s: epoch header %q, want 2.7", name, r.Epoch)
			}
		}
	}
	r := s1.requests()[0]
	if r.Headers.Get("Authorization") != "Bearer t" || r.Headers.Get("Content-Type") != "text/plain" || r.Body != "a0" {
		t.Fatalf("headers/body not carried: %v %q", r.Headers, r.Body)
	}
	if ct := s2.requests()[0].Headers.Get("Content-Type"); ct != "application/octet-stream" {
		t.Fatalf("default content type %q", ct)
	}
	removals := h.p.commands(isDelivered)
	ids := 0
	for _, c := range removals {
		ids += len(c.GetSfDelivered().Ids)
	}
	if ids != 2*n {
		t.Fatalf("SFDelivered carried %d ids, want %d", ids, 2*n)
	}
	// Per target: the held first removal, then the rest in one or two.
	if len(removals) > 6 {
		t.Fatalf("%d SFDelivered commands for %d messages: not batched", len(removals), 2*n)
	}
	if st := h.stats(t, "one"); st.Delivered != n {
		t.Fatalf("delivered counter %d", st.Delivered)
	}
}

func TestRemoveDelayGathersDeliveredIDs(t *testing.T) {
	const n = 30
	clock := clocktest.New(time.Now())
	h := newHarnessWith(t, role.State{Role: role.Standby}, func(o *DelivererOptions) {
		o.RemoveDelay, o.Clock = 20*time.Millisecond, clock
	})
	s := newSink(t, h.roles, nil)
	if err := h.d.SetTargets([]Target{fastTarget("one", s.srv.URL)}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		h.enqueue(t, "one", fmt.Sprintf("m%02d", i), "x")
	}
	h.roles.Publish(activeState(1, 1))
	testwait.For(t, 10*time.Second, "every message delivered", func() bool { return h.d.Live()["one"].Delivered >= n })
	testwait.For(t, 10*time.Second, "the remover's wait", func() bool { return clock.Waiting() > 0 })
	if got := h.p.commands(isDelivered); len(got) != 0 {
		t.Fatalf("%d SFDelivered before the remove delay passed", len(got))
	}
	clock.FireAll()
	testwait.For(t, 10*time.Second, "removal of every delivered message", func() bool { return h.stats(t, "one").Pending == 0 })
	removals := h.p.commands(isDelivered)
	if len(removals) != 1 || len(removals[0].GetSfDelivered().Ids) != n {
		t.Fatalf("removals %v, want one SFDelivered of all %d ids", removals, n)
	}
}

func TestRemoveDelayAlsoGathersWhileARemovalCommits(t *testing.T) {
	clock := clocktest.New(time.Now())
	hold := make(chan struct{})
	var held atomic.Bool
	h := newHarnessWith(t, role.State{Role: role.Standby}, func(o *DelivererOptions) {
		o.RemoveDelay, o.Clock = 20*time.Millisecond, clock
	})
	h.p.before = func(ctx context.Context, cmd *fsmpb.Command) error {
		if cmd.GetSfDelivered() != nil && held.CompareAndSwap(false, true) {
			<-hold // the first removal commits slowly
		}
		return nil
	}
	s := newSink(t, h.roles, nil)
	if err := h.d.SetTargets([]Target{fastTarget("one", s.srv.URL)}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		h.enqueue(t, "one", fmt.Sprintf("a%02d", i), "x")
	}
	h.roles.Publish(activeState(1, 1))
	testwait.For(t, 10*time.Second, "the first wave delivered", func() bool { return h.d.Live()["one"].Delivered >= 10 })
	testwait.For(t, 10*time.Second, "the remover's wait", func() bool { return clock.Waiting() > 0 })
	clock.FireAll()
	testwait.For(t, 10*time.Second, "the first removal under way", held.Load)
	for i := range 10 {
		h.enqueue(t, "one", fmt.Sprintf("b%02d", i), "x")
	}
	testwait.For(t, 10*time.Second, "the second wave delivered", func() bool { return h.d.Live()["one"].Delivered >= 20 })
	close(hold)
	testwait.For(t, 10*time.Second, "the remover's next wait", func() bool { return clock.Waiting() > 0 })
	if got := h.p.commands(isDelivered); len(got) != 1 {
		t.Fatalf("%d SFDelivered before the second delay passed, want 1", len(got))
	}
	clock.FireAll()
	testwait.For(t, 10*time.Second, "removal of every delivered message", func() bool { return h.stats(t, "one").Pending == 0 })
	if got := h.p.commands(isDelivered); len(got) != 2 || len(got[1].GetSfDelivered().Ids) != 10 {
		t.Fatalf("removals %v, want a second SFDelivered of the 10 ids gathered meanwhile", got)
	}
}

func TestDeliveryFailureThenRecovery(t *testing.T) {
	h := newHarness(t, activeState(1, 1))
	var failing atomic.Bool
	failing.Store(true)
	s := newSink(t, h.roles, func(r received, n int) int {
		if failing.Load() {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	if err := h.d.SetTargets([]Target{fastTarget("up", s.srv.URL)}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		h.enqueue(t, "up", fmt.Sprintf("m%02d", i), "x")
	}
	testwait.For(t, 10*time.Second, "a few failed attempts", func() bool { return len(s.requests()) >= 5 })
	for _, r := range s.requests() {
		if r.ID != "m00" {
			t.Fatalf("while the head fails, %s was sent (FIFO broken)", r.ID)
		}
	}
	if st, err := h.op.Stats(); err != nil || len(st) != 1 || !strings.Contains(st[0].LastError, "503") || st[0].HeadAttempts == 0 {
		t.Fatalf("stats while failing: %+v %v", st, err)
	}
	failing.Store(false)
	testwait.For(t, 10*time.Second, "all delivered", func() bool { return h.stats(t, "up").Pending == 0 })
	var ok []string
	for _, r := range s.requests() {
		if r.ID != "m00" || len(ok) == 0 {
			if len(ok) == 0 || ok[len(ok)-1] != r.ID {
				ok = append(ok, r.ID)
			}
		}
	}
	if len(ok) != 20 {
		t.Fatalf("distinct in-order ids %v", ok)
	}
	for i, id := range ok {
		if id != fmt.Sprintf("m%02d", i) {
			t.Fatalf("order %v", ok)
		}
	}
	if st := h.stats(t, "up"); st.Parked != 0 || st.Delivered != 20 {
		t.Fatalf("stats %+v", st)
	}
	// The target works again: its last error no longer shows.
	if st, err := h.op.Stats(); err != nil || len(st) != 1 || st[0].LastError != "" {
		t.Fatalf("stats after recovery: %+v %v; want no last error", st, err)
	}
}

func TestDeliveryParksAfterMaxAttempts(t *testing.T) {
	h := newHarness(t, activeState(1, 1))
	s := newSink(t, h.roles, func(r received, n int) int {
		if strings.HasPrefix(r.ID, "bad") {
			return http.StatusBadGateway
		}
		return http.StatusOK
	})
	tg := fastTarget("up", s.srv.URL)
	tg.MaxAttempts = 3
	if err := h.d.SetTargets([]Target{tg}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ok-1", "bad-1", "ok-2", "bad-2", "ok-3"} {
		h.enqueue(t, "up", id, id)
	}
	testwait.For(t, 10*time.Second, "queue drained", func() bool {
		st := h.stats(t, "up")
		return st.Pending == 0 && st.Parked == 2
	})

	counts := map[string]int{}
	var order []string
	for _, r := range s.requests() {
		if counts[r.ID] == 0 {
			order = append(order, r.ID)
		}
		counts[r.ID]++
	}
	if strings.Join(order, ",") != "ok-1,bad-1,ok-2,bad-2,ok-3" {
		t.Fatalf("first-attempt order %v", order)
	}
	if counts["bad-1"] != 3 || counts["bad-2"] != 3 || counts["ok-2"] != 1 {
		t.Fatalf("attempt counts %v, want 3 per bad message", counts)
	}
	parked, err := h.op.List("up", true, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(parked) != 2 || parked[0].ID != "bad-1" || parked[0].Attempts != 3 || !strings.Contains(parked[0].ParkReason, "502") {
		t.Fatalf("parked %+v", parked)
	}
}

// The delivery gate closes for a moment without a role change when the
// leader's quorum confirmation is late. If that moment falls as a message
// is to be parked, the park waits for the gate like an attempt does: the
// worker must not stop, because no role change will start another one.
func TestAGateClosedForAMomentAsAMessageParksDoesNotStopDelivery(t *testing.T) {
	roles := roletest.New(activeState(1, 1))
	h := newHarnessWith(t, activeState(1, 1), func(o *DelivererOptions) { o.Roles = roles })
	s := newSink(t, nil, func(r received, n int) int {
		if strings.HasPrefix(r.ID, "bad") {
			roles.LateFor(1) // the park's look at the gate finds it closed
			return http.StatusBadGateway
		}
		return http.StatusOK
	})
	tg := fastTarget("up", s.srv.URL)
	tg.MaxAttempts = 1
	if err := h.d.SetTargets([]Target{tg}); err != nil {
		t.Fatal(err)
	}
	h.enqueue(t, "up", "bad-1", "x")
	testwait.For(t, 10*time.Second, "bad-1 parked", func() bool { return h.stats(t, "up").Parked == 1 })
	h.enqueue(t, "up", "ok-1", "y")
	h.enqueue(t, "up", "bad-2", "z")
	testwait.ForDetail(t, 10*time.Second, "ok-1 delivered and bad-2 parked after the gate closed at a park", func() (bool, string) {
		st := h.stats(t, "up")
		return st.Pending == 0 && st.Parked == 2, fmt.Sprintf("pending %d, parked %d", st.Pending, st.Parked)
	})
}

// A target without max_attempts never parks a message for failing: a
// historian down for a week must find every message waiting (the site
// config's 0, and the zero value here, mean the same).
func TestDeliveryWithoutMaxAttemptsNeverParks(t *testing.T) {
	h := newHarness(t, activeState(1, 1))
	s, healed := newFailingSink(t, h, http.StatusServiceUnavailable)
	tg := fastTarget("up", s.srv.URL)
	tg.MaxAttempts = 0
	if err := h.d.SetTargets([]Target{tg}); err != nil {
		t.Fatal(err)
	}
	h.enqueue(t, "up", "m-1", "m-1")
	testwait.For(t, 10*time.Second, "30 failed attempts", func() bool { return len(s.requests()) >= 30 })
	if st := h.stats(t, "up"); st.Parked != 0 || st.Pending != 1 {
		t.Fatalf("after 30 failed attempts: %+v; want the message pending, none parked", st)
	}
	healed.Store(true)
	testwait.For(t, 10*time.Second, "delivered once the target answers", func() bool {
		st := h.stats(t, "up")
		return st.Pending == 0 && st.Parked == 0
	})
}

func TestOperatorRetryAndDiscard(t *testing.T) {
	h := newHarness(t, activeState(1, 1))
	s, healed := newFailingSink(t, h, http.StatusInternalServerError)
	tg := fastTarget("up", s.srv.URL)
	tg.MaxAttempts = 1
	if err := h.d.SetTargets([]Target{tg}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		h.enqueue(t, "up", id, id)
	}
	testwait.For(t, 10*time.Second, "all parked", func() bool { return h.stats(t, "up").Parked == 3 })
	healed.Store(true)

	ctx := context.Background()
	res, err := h.op.Retry(ctx, Selection{IDs: []string{"a", "nope"}})
	if err != nil || res.Moved != 1 || len(res.NotParked) != 1 || res.NotParked[0] != "nope" {
		t.Fatalf("retry: %+v %v", res, err)
	}
	testwait.For(t, 10*time.Second, "a delivered after retry", func() bool {
		st := h.stats(t, "up")
		return st.Delivered == 1 && st.Pending == 0
	})

	res, err = h.op.Discard(ctx, Selection{AllOfTarget: "up"}, "operator said so")
	if err != nil || res.Moved != 2 {
		t.Fatalf("discard all: %+v %v", res, err)
	}
	st := h.stats(t, "up")
	if st.Parked != 0 || st.Discarded != 2 || st.Delivered != 1 {
		t.Fatalf("stats after discard %+v", st)
	}
	if r := h.enqueue(t, "up", "b", "again"); !r.Duplicate {
		t.Fatal("re-enqueue of a discarded id was stored again")
	}
	if _, err := h.op.Retry(ctx, Selection{}); err == nil {
		t.Fatal("retry with an empty selection accepted")
	}
	stats, err := h.op.Stats()
	if err != nil || len(stats) != 1 || !stats[0].Configured || stats[0].Discarded != 2 {
		t.Fatalf("operator stats %+v %v", stats, err)
	}
}

func TestDeliveryStopsWhenRoleLeavesActive(t *testing.T) {
	h := newHarness(t, activeState(1, 1))
	const stopAfter = 5
	var violations atomic.Int32
	var delivered atomic.Int32
	s := newSink(t, h.roles, func(r received, n int) int {
		if r.Role != role.Active {
			violations.Add(1)
		}
		// Publish the role change while this delivery is being
		// answered: the worker must not start another one.
		if delivered.Add(1) == stopAfter {
			h.roles.Publish(role.State{Role: role.Standby, Epoch: role.Epoch{Cluster: 1, Term: 2}})
		}
		return http.StatusOK
	})
	if err := h.d.SetTargets([]Target{fastTarget("up", s.srv.URL)}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		h.enqueue(t, "up", fmt.Sprintf("m%02d", i), "x")
	}
	// Before the deliverer has taken the Active role it is not active
	// either: wait for the deliveries that change the role first.
	testwait.For(t, 10*time.Second, "the first deliveries", func() bool { return delivered.Load() >= stopAfter })
	testwait.For(t, 10*time.Second, "delivery to stop", func() bool {
		st := h.d.Status()
		return !st.Active && len(st.Workers) == 0
	})

	if got := len(s.requests()); got != stopAfter {
		t.Fatalf("%d deliveries, want exactly %d: delivery continued after the role change", got, stopAfter)
	}
	// Resume under a new epoch: the rest arrive, stamped with it.
	h.roles.Publish(activeState(1, 3))
	testwait.For(t, 10*time.Second, "the rest delivered", func() bool { return h.stats(t, "up").Pending == 0 })
	got := s.requests()
	for i, r := range got[stopAfter:] {
		if r.Epoch != "1.3" {
			t.Fatalf("request %d after resuming has epoch %q, want 1.3", i, r.Epoch)
		}
	}
	if violations.Load() != 0 {
		t.Fatalf("%d requests arrived while the node was not Active", violations.Load())
	}
	// At-least-once: the message answered as the role changed may be sent
	// again; everything else exactly once, all in order.
	seen := map[string]int{}
	for _, r := range got {
		seen[r.ID]++
	}
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("m%02d", i)
		if seen[id] == 0 || (seen[id] > 1 && i != stopAfter-1) {
			t.Fatalf("delivery counts %v", seen)
		}
	}
}

func TestRoleLossCancelsInFlightDelivery(t *testing.T) {
	h := newHarness(t, activeState(1, 1))
	arrived := make(chan struct{}, 1)
	s := newSink(t, h.roles, func(r received, n int) int {
		select {
		case arrived <- struct{}{}:
		default:
		}
		return 0 // hang until the client goes away
	})
	tg := fastTarget("up", s.srv.URL)
	tg.Timeout = time.Hour // only the role change can end this attempt
	if err := h.d.SetTargets([]Target{tg}); err != nil {
		t.Fatal(err)
	}
	h.enqueue(t, "up", "slow", "x")
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("delivery never started")
	}
	start := time.Now()
	h.roles.Publish(role.State{Role: role.Detached})
	testwait.For(t, 10*time.Second, "delivery to stop", func() bool { return len(h.d.Status().Workers) == 0 })
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("stopping took %v", d)
	}
	if st := h.stats(t, "up"); st.Pending != 1 || st.Parked != 0 {
		t.Fatalf("an interrupted delivery changed the buffer: %+v", st)
	}
}

func TestNeverAnsweringTargetIsBoundedByTimeout(t *testing.T) {
	h := newHarness(t, activeState(1, 1))
	s := newSink(t, h.roles, func(r received, n int) int { return 0 })
	tg := fastTarget("black-hole", s.srv.URL)
	tg.Timeout = 50 * time.Millisecond
	tg.MaxAttempts = 2
	if err := h.d.SetTargets([]Target{tg}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	h.enqueue(t, "black-hole", "m", "x")
	testwait.For(t, 10*time.Second, "the message parked", func() bool { return h.stats(t, "black-hole").Parked == 1 })
	if d := time.Since(start); d < 2*tg.Timeout {
		t.Fatalf("parked after %v, before two timeouts of %v", d, tg.Timeout)
	}
	parked, err := h.op.List("black-hole", true, 1)
	if err != nil || len(parked) != 1 || !strings.Contains(parked[0].ParkReason, "no answer within 50ms") {
		t.Fatalf("parked %+v %v", parked, err)
	}
}

func TestSetTargetsReconfiguresByDifference(t *testing.T) {
	h := newHarness(t, activeState(1, 1))
	var mu sync.Mutex
	hits := map[string]int{}
	s := newSink(t, h.roles, func(r received, n int) int {
		mu.Lock()
		hits[r.Headers.Get("X-Which")]++
		mu.Unlock()
		return http.StatusOK
	})
	mk := func(name, which string) Target {
		tg := fastTarget(name, s.srv.URL)
		tg.Headers = map[string]string{"X-Which": which}
		return tg
	}
	if err := h.d.SetTargets([]Target{mk("a", "a1"), mk("b", "b1")}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "workers a and b", func() bool { return strings.Join(h.d.Status().Workers, ",") == "a,b" })
	if err := h.d.SetTargets([]Target{mk("a", "a2"), mk("c", "c1")}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "workers a and c", func() bool { return strings.Join(h.d.Status().Workers, ",") == "a,c" })
	h.enqueue(t, "a", "x1", "x")
	h.enqueue(t, "c", "x2", "x")
	testwait.For(t, 5*time.Second, "delivered", func() bool { return h.stats(t, "a").Pending == 0 && h.stats(t, "c").Pending == 0 })
	mu.Lock()
	defer mu.Unlock()
	if hits["a2"] != 1 || hits["c1"] != 1 || hits["a1"] != 0 {
		t.Fatalf("deliveries by config %v: a changed target must use its new headers", hits)
	}
	if _, err := h.e.Enqueue(context.Background(), "b", []byte("x"), "", nil); err == nil {
		t.Fatal("enqueue to a removed target accepted")
	}
	if err := h.d.SetTargets([]Target{{Name: "bad", URL: "ftp://x"}}); err == nil {
		t.Fatal("an ftp target accepted")
	}
	if got := h.d.TargetNames(); strings.Join(got, ",") != "a,c" {
		t.Fatalf("an invalid SetTargets changed the targets: %v", got)
	}
}

func TestEpochChangeWhileActiveRestampsDeliveries(t *testing.T) {
	h := newHarness(t, activeState(1, 1))
	s := newSink(t, h.roles, nil)
	if err := h.d.SetTargets([]Target{fastTarget("up", s.srv.URL)}); err != nil {
		t.Fatal(err)
	}
	h.enqueue(t, "up", "before", "x")
	testwait.For(t, 5*time.Second, "first delivery", func() bool { return h.stats(t, "up").Pending == 0 })
	// An availability override bumps the cluster epoch; the node stays Active.
	h.roles.Publish(activeState(2, 1))
	testwait.For(t, 5*time.Second, "workers under the new epoch", func() bool {
		st := h.d.Status()
		return st.Epoch == role.Epoch{Cluster: 2, Term: 1} && len(st.Workers) == 1
	})

	h.enqueue(t, "up", "after", "x")
	testwait.For(t, 5*time.Second, "second delivery", func() bool { return h.stats(t, "up").Pending == 0 })
	got := s.requests()
	if len(got) != 2 || got[0].Epoch != "1.1" || got[1].Epoch != "2.1" || got[1].ID != "after" {
		t.Fatalf("requests %+v", got)
	}
}

// TestDeliveryWindow checks max_in_flight: at most that many deliveries are
// under way at once (and that many are, when the target is slow), and
// every message arrives once. With 1 the target
// sees strict enqueue order even though it answers slowly.
func TestDeliveryWindow(t *testing.T) {
	for _, window := range []int{1, 4} {
		t.Run(fmt.Sprint("max_in_flight=", window), func(t *testing.T) {
			const n = 40
			var (
				mu        sync.Mutex
				cur, peak int
				started   []string
			)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				cur++
				peak = max(peak, cur)
				started = append(started, r.Header.Get(HeaderIdempotencyKey))
				mu.Unlock()
				time.Sleep(5 * time.Millisecond) // a slow target: deliveries overlap if allowed
				mu.Lock()
				cur--
				mu.Unlock()
			}))
			defer srv.Close()
			h := newHarness(t, role.State{Role: role.Standby})
			tg := fastTarget("up", srv.URL)
			tg.MaxInFlight = window
			if err := h.d.SetTargets([]Target{tg}); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n; i++ {
				h.enqueue(t, "up", fmt.Sprintf("m%02d", i), "x")
			}
			h.roles.Publish(activeState(1, 1))
			testwait.For(t, 10*time.Second, "every message delivered and removed", func() bool {
				return h.stats(t, "up").Pending == 0
			})

			mu.Lock()
			defer mu.Unlock()
			if peak != window {
				t.Errorf("at most %d deliveries were under way at once, want exactly %d", peak, window)
			}
			if len(started) != n {
				t.Fatalf("target got %d requests, want %d (each message once)", len(started), n)
			}
			seen := map[string]bool{}
			for _, id := range started {
				if seen[id] {
					t.Fatalf("%s delivered twice", id)
				}
				seen[id] = true
			}
			if window == 1 {
				for i, id := range started {
					if want := fmt.Sprintf("m%02d", i); id != want {
						t.Fatalf("request %d is %s, want %s (strict FIFO)", i, id, want)
					}
				}
			}
		})
	}
}

// An https target signed by a private CA: with the system's roots every
// delivery fails (unknown authority, shown as the last error); with the CA
// in ca_file it is delivered. A ca_file that cannot be read yet fails the
// attempt, visibly, and is read again on the next one.
func TestHTTPSTargetTrustsItsCAFile(t *testing.T) {
	h := newHarness(t, activeState(1, 1))
	var mu sync.Mutex
	got := map[string]int{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get(HeaderIdempotencyKey)]++
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "historian-ca.pem")
	private := fastTarget("private-ca", srv.URL)
	private.CAFile = caFile
	if err := h.d.SetTargets([]Target{private, fastTarget("system-roots", srv.URL)}); err != nil {
		t.Fatal(err)
	}
	h.enqueue(t, "private-ca", "p1", "x")
	h.enqueue(t, "system-roots", "s1", "x")
	lastError := func(target string) string {
		st, err := h.op.Stats()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s.Target == target {
				return s.LastError
			}
		}
		return ""
	}
	testwait.For(t, 10*time.Second, "both targets failing for their own reason", func() bool {
		return strings.Contains(lastError("private-ca"), "read ca_file") &&
			strings.Contains(lastError("system-roots"), "certificate signed by unknown authority")
	})

	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, ca, 0o644); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the private-CA target delivered", func() bool { return h.stats(t, "private-ca").Pending == 0 })
	mu.Lock()
	defer mu.Unlock()
	if got["p1"] != 1 || got["s1"] != 0 {
		t.Fatalf("the TLS server received %v, want p1 once and never s1", got)
	}
	if st := h.stats(t, "system-roots"); st.Pending != 1 {
		t.Fatalf("system-roots target: %+v, want its message still pending", st)
	}
}

// A target whose certificate moves to a new CA, rotated into ca_file in
// place: deliveries fail verification (shown) until the file holds the new
// CA, then go on, with no failover and no change to the target.
func TestHTTPSTargetFollowsACARotatedInPlace(t *testing.T) {
	h := newHarness(t, activeState(1, 1))
	oldCert, oldCA := selfSignedFor127(t, "historian-2025")
	newCert, newCA := selfSignedFor127(t, "historian-2026")
	var current atomic.Pointer[tls.Certificate]
	current.Store(&oldCert)
	var mu sync.Mutex
	got := map[string]int{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get(HeaderIdempotencyKey)]++
		mu.Unlock()
	}))
	// Our own TLS listener: httptest's StartTLS would put its built-in
	// certificate first.
	srv.Listener = tls.NewListener(srv.Listener, &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return current.Load(), nil },
	})
	srv.Start()
	t.Cleanup(srv.Close)
	url := "https://" + srv.Listener.Addr().String()
	caFile := filepath.Join(t.TempDir(), "historian-ca.pem")
	if err := os.WriteFile(caFile, oldCA, 0o644); err != nil {
		t.Fatal(err)
	}
	target := fastTarget("historian", url)
	target.CAFile = caFile
	target.MaxAttempts = 1 << 30 // refused for as long as the test needs, never parked
	if err := h.d.SetTargets([]Target{target}); err != nil {
		t.Fatal(err)
	}
	h.enqueue(t, "historian", "before", "x")
	testwait.For(t, 10*time.Second, "delivery under the old CA", func() bool { return h.stats(t, "historian").Pending == 0 })

	// The historian moves to its new certificate; keep-alive connections
	// made under the old one go too.
	current.Store(&newCert)
	srv.CloseClientConnections()
	h.enqueue(t, "historian", "after", "x")
	testwait.For(t, 10*time.Second, "the new certificate refused while ca_file holds the old CA", func() bool {
		st, err := h.op.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return len(st) == 1 && st[0].Pending == 1 && strings.Contains(st[0].LastError, "certificate signed by unknown authority")
	})

	if err := os.WriteFile(caFile, newCA, 0o644); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "delivery once ca_file holds the new CA", func() bool { return h.stats(t, "historian").Pending == 0 })
	mu.Lock()
	defer mu.Unlock()
	if got["before"] != 1 || got["after"] != 1 {
		t.Fatalf("the historian received %v, want each message once", got)
	}
}

// selfSignedFor127 is a self-signed CA certificate valid for 127.0.0.1,
// as a TLS certificate and as the PEM a ca_file would hold.
func selfSignedFor127(t *testing.T, name string) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// A target at its max_pending refuses enqueues, naming the cap, and takes
// them again once deliveries have caught up; other targets are not held.
func TestMaxPendingRefusesUntilDeliveriesCatchUp(t *testing.T) {
	h := newHarness(t, activeState(1, 1))
	var up atomic.Bool
	s := newSink(t, nil, func(received, int) int {
		if up.Load() {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	capped := fastTarget("capped", s.srv.URL)
	capped.MaxAttempts = 1 << 30
	capped.MaxPending = 2
	other := fastTarget("other", s.srv.URL)
	other.MaxAttempts = 1 << 30
	if err := h.d.SetTargets([]Target{capped, other}); err != nil {
		t.Fatal(err)
	}
	h.enqueue(t, "capped", "c1", "x")
	h.enqueue(t, "capped", "c2", "x")
	_, err := h.e.Enqueue(context.Background(), "capped", []byte("x"), "c3", nil)
	var full *TargetFullError
	if !errors.As(err, &full) || full.Pending != 2 || full.Limit != 2 || !strings.Contains(err.Error(), "max_pending is 2") {
		t.Fatalf("third enqueue to a target capped at 2: err = %v, want a TargetFullError naming the cap", err)
	}
	if res := h.enqueue(t, "capped", "c2", "x"); !res.Duplicate {
		t.Fatalf("a retry of a stored message to a full target: %+v, want it answered as a duplicate", res)
	}
	h.enqueue(t, "other", "o1", "x")
	if st := h.stats(t, "capped"); st.Pending != 2 {
		t.Fatalf("capped target holds %d, want 2 (the refused message not stored)", st.Pending)
	}

	up.Store(true)
	testwait.For(t, 10*time.Second, "the capped target delivered", func() bool { return h.stats(t, "capped").Pending == 0 })
	h.enqueue(t, "capped", "c3", "x")
	testwait.For(t, 10*time.Second, "c3 delivered", func() bool { return h.stats(t, "capped").Pending == 0 })
}

// What is enqueued while a strict worker delivers is delivered after it,
// once and in order: each delivery of m-i enqueues m-(i+1), and every
// tenth two more, so reads find one, several or none waiting.
func TestMessagesEnqueuedDuringADeliveryFollowIt(t *testing.T) {
	h := newHarness(t, activeState(1, 1))
	const n = 60
	var next atomic.Int32 // the highest id enqueued
	enqueue := func() {
		i := next.Add(1)
		if i >= n {
			return
		}
		id := fmt.Sprintf("m-%02d", i)
		if _, err := h.e.Enqueue(context.Background(), "up", []byte(id), id, nil); err != nil {
			t.Errorf("enqueue %s: %v", id, err)
		}
	}
	s := newSink(t, h.roles, func(r received, _ int) int {
		enqueue()
		if strings.HasSuffix(r.ID, "0") {
			enqueue()
			enqueue()
		}
		return http.StatusOK
	})
	tg := fastTarget("up", s.srv.URL)
	tg.BatchMaxMessages = 2
	if err := h.d.SetTargets([]Target{tg}); err != nil {
		t.Fatal(err)
	}
	h.enqueue(t, "up", "m-00", "m-00")
	testwait.For(t, 10*time.Second, fmt.Sprintf("%d messages delivered", n), func() bool {
		return h.stats(t, "up").Delivered >= n
	})
	var got []string
	for _, r := range s.requests() {
		for _, m := range batchItems(t, r, BatchJSON) {
			got = append(got, m.ID)
		}
	}
	if len(got) != n {
		t.Fatalf("%d deliveries for %d messages: %v", len(got), n, got)
	}
	for i, id := range got {
		if want := fmt.Sprintf("m-%02d", i); id != want {
			t.Fatalf("delivery %d is %s, want %s: %v", i, id, want, got)
		}
	}
}
