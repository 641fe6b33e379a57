package storeforward

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/role"
)

func TestClassifyHTTPAnswers(t *testing.T) {
	for _, c := range []struct {
		status    int
		parkOn    []string
		permanent bool
	}{
		{400, nil, true}, {401, nil, true}, {404, nil, true}, {422, nil, true}, {499, nil, true},
		{408, nil, false}, {425, nil, false}, {429, nil, false},
		{500, nil, false}, {502, nil, false}, {503, nil, false}, {302, nil, false},
		{400, []string{"none"}, false}, {503, []string{"5xx"}, true}, {400, []string{"5xx"}, false},
		{409, []string{"409", "422"}, true}, {422, []string{"409", "422"}, true}, {400, []string{"409", "422"}, false},
		{429, []string{"4xx"}, true},
	} {
		got, _ := classify(fmt.Errorf("post: %w", &DeliveryError{Status: c.status}), c.parkOn)
		if got != c.permanent {
			t.Errorf("status %d park_on %v: permanent %v, want %v", c.status, c.parkOn, got, c.permanent)
		}
	}
	// No answer at all is never permanent, whatever park_on says.
	if p, _ := classify(errors.New("post: connection refused"), []string{"4xx", "5xx"}); p {
		t.Error("a connection error parks")
	}
	if _, wait := classify(&DeliveryError{Status: 503, RetryAfter: 3 * time.Hour}, nil); wait != maxRetryAfter {
		t.Errorf("Retry-After of 3h gives %v, want the bound %v", wait, maxRetryAfter)
	}
}

func TestValidateParkOn(t *testing.T) {
	for _, ok := range [][]string{nil, {"none"}, {"400", "4xx", "23505", "23xxx"}} {
		if err := ValidateParkOn(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range [][]string{{"none", "400"}, {""}, {"4 x"}, {"4xx-"}, {strings.Repeat("1", 17)}} {
		if err := ValidateParkOn(bad); err == nil || !strings.Contains(err.Error(), "park_on") {
			t.Errorf("%q: %v, want a park_on error", bad, err)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"2": 2 * time.Second, " 120 ": 2 * time.Minute, "": 0, "soon": 0, "-1": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Minute).Format(http.TimeFormat):     0,
	} {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("Retry-After %q: %v, want %v", v, got, want)
		}
	}
}

func TestErrorTextIsValidUTF8AndBounded(t *testing.T) {
	s := errorText(errors.New(strings.Repeat("é", 600)+"\xff"), 1023)
	if len(s) > 1023 || !utf8.ValidString(s) {
		t.Fatalf("%d bytes, valid %v", len(s), utf8.ValidString(s))
	}
	if s := errorText(errors.New("bad \xff answer"), 100); !utf8.ValidString(s) || !strings.Contains(s, "answer") {
		t.Fatalf("%q", s)
	}
}

func TestPermanentRefusalParksAtOnceAndTheNextIsDelivered(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessWith(t, activeState(1, 1), func(o *DelivererOptions) { o.Metrics = m })
	s := newSink(t, h.roles, func(r received, n int) int {
		switch {
		case r.ID == "bad":
			return http.StatusBadRequest
		case r.ID == "busy" && n <= 2:
			return http.StatusTooManyRequests // transient: retried
		}
		return http.StatusOK
	})
	s.setHeader(func(r received, n int) http.Header {
		if r.ID == "bad" {
			return http.Header{"Content-Type": {"text/plain"}}
		}
		return nil
	})
	tg := fastTarget("up", s.srv.URL)
	tg.MaxAttempts = 1 << 30 // never parks by count: only the refusal parks
	if err := h.d.SetTargets([]Target{tg}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ok-1", "bad", "busy", "ok-2"} {
		h.enqueue(t, "up", id, id)
	}
	testwait.For(t, 10*time.Second, "queue drained", func() bool {
		st := h.stats(t, "up")
		return st.Pending == 0 && st.Parked == 1
	})
	counts := map[string]int{}
	for _, r := range s.requests() {
		counts[r.ID]++
	}
	if counts["bad"] != 1 || counts["busy"] != 3 || counts["ok-2"] != 1 {
		t.Fatalf("attempts %v: want bad once (parked at once), busy 3 times (429 retried)", counts)
	}
	parked, err := h.op.List("up", true, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(parked) != 1 || parked[0].ID != "bad" || parked[0].Attempts != 1 || !strings.Contains(parked[0].ParkReason, "400") || parked[0].LastError != parked[0].ParkReason {
		t.Fatalf("parked %+v", parked)
	}
	if v := gathered(t, reg, "scadad_sf_parked_total", ParkRefused); v != 1 {
		t.Fatalf("scadad_sf_parked_total{reason=refused} = %v, want 1", v)
	}
	if v := gathered(t, reg, "scadad_sf_parked_total", ParkMaxAttempts); v != 0 {
		t.Fatalf("scadad_sf_parked_total{reason=max_attempts} = %v, want 0", v)
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	h := newHarness(t, activeState(1, 1))
	s := newSink(t, h.roles, func(r received, n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	s.setHeader(func(r received, n int) http.Header {
		if n == 1 {
			return http.Header{"Retry-After": {"1"}}
		}
		return nil
	})
	if err := h.d.SetTargets([]Target{fastTarget("up", s.srv.URL)}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	h.enqueue(t, "up", "m1", "x")
	testwait.For(t, 10*time.Second, "delivered", func() bool { return h.stats(t, "up").Delivered == 1 })
	// The backoff alone would retry within 4 ms.
	if got := time.Since(start); got < time.Second {
		t.Fatalf("delivered %v after the first attempt answered 503 with Retry-After: 1", got)
	}
	if n := len(s.requests()); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
}

func TestParkOnReplacesTheClassification(t *testing.T) {
	h := newHarness(t, activeState(1, 1))
	s := newSink(t, h.roles, func(r received, n int) int {
		if r.ID == "gone" {
			return http.StatusServiceUnavailable
		}
		if r.ID == "bad" {
			return http.StatusBadRequest
		}
		return http.StatusOK
	})
	tg := fastTarget("up", s.srv.URL)
	tg.ParkOn = []string{"5xx"}
	tg.MaxAttempts = 3
	if err := h.d.SetTargets([]Target{tg}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"gone", "bad", "ok"} {
		h.enqueue(t, "up", id, id)
	}
	testwait.For(t, 10*time.Second, "queue drained", func() bool {
		st := h.stats(t, "up")
		return st.Pending == 0 && st.Parked == 2
	})
	counts := map[string]int{}
	for _, r := range s.requests() {
		counts[r.ID]++
	}
	if counts["gone"] != 1 || counts["bad"] != 3 || counts["ok"] != 1 {
		t.Fatalf("attempts %v: park_on 5xx parks 503 at once and retries 400 up to max_attempts", counts)
	}
}

func TestAttemptsAreReplicatedAndCountOnAfterFailover(t *testing.T) {
	h := newHarnessWith(t, activeState(1, 1), func(o *DelivererOptions) { o.AttemptsInterval = 10 * time.Millisecond })
	s := newSink(t, h.roles, func(r received, n int) int { return http.StatusServiceUnavailable })
	tg := fastTarget("up", s.srv.URL)
	tg.BackoffFloor, tg.BackoffMax = 20*time.Millisecond, 20*time.Millisecond
	tg.MaxAttempts = 8
	if err := h.d.SetTargets([]Target{tg}); err != nil {
		t.Fatal(err)
	}
	h.enqueue(t, "up", "m1", "x")
	testwait.For(t, 10*time.Second, "attempts recorded in the buffer", func() bool {
		msgs, err := h.op.List("up", false, 1)
		return err == nil && len(msgs) == 1 && msgs[0].Attempts >= 3 && strings.Contains(msgs[0].LastError, "503") && !msgs[0].LastAttemptAt.IsZero()
	})
	// A failover: the new term's worker counts on from the buffer.
	h.roles.Publish(role.State{Role: role.Standby})
	testwait.For(t, 5*time.Second, "delivery stopped", func() bool { return !h.d.Status().Active })
	before := len(s.requests())
	recorded, _ := h.op.List("up", false, 1)
	h.roles.Publish(activeState(1, 2))
	testwait.For(t, 10*time.Second, "parked after max attempts", func() bool { return h.stats(t, "up").Parked == 1 })
	parked, _ := h.op.List("up", true, 1)
	if parked[0].Attempts != 8 {
		t.Fatalf("parked with %d attempts, want max_attempts 8", parked[0].Attempts)
	}
	if after := len(s.requests()) - before; after != 8-int(recorded[0].Attempts) {
		t.Fatalf("the new Active made %d attempts after %d recorded by the old one; want them to add up to 8", after, recorded[0].Attempts)
	}
	if got := h.p.commands(func(c *fsmpb.Command) bool { return c.GetSfAttempts() != nil }); len(got) == 0 || len(got) > 8 {
		t.Fatalf("%d SFAttempts commands for 8 attempts", len(got))
	}
}

// A message whose id (its Idempotency-Key) or stored header cannot be
// put in an HTTP request never can: it parks at once, naming why, even
// with park_on [none] (no receiver answered it), and the target moves
// on. It was retried forever. The enqueue refuses such messages now; they
// are stored here with a bare SFEnqueue, as an earlier version stored them.
func TestUnsendableMessageParksAtOnce(t *testing.T) {
	h := newHarnessWith(t, activeState(1, 1), nil)
	s := newSink(t, h.roles, func(received, int) int { return http.StatusOK })
	tg := fastTarget("up", s.srv.URL)
	tg.MaxAttempts = 1 << 30
	tg.ParkOn = []string{ParkOnNone}
	if err := h.d.SetTargets([]Target{tg}); err != nil {
		t.Fatal(err)
	}
	h.enqueue(t, "up", "ok-1", "a")
	storeUnchecked := func(m *fsmpb.Message) {
		t.Helper()
		res, err := h.p.Propose(context.Background(), &fsmpb.Command{Body: &fsmpb.Command_SfEnqueue{SfEnqueue: &fsmpb.SFEnqueue{Messages: []*fsmpb.Message{m}}}})
		if err != nil || res.Err != nil {
			t.Fatalf("store %q: %v %v", m.Id, err, res)
		}
	}
	storeUnchecked(&fsmpb.Message{Id: "bad\nid", Target: "up", Payload: []byte("b")})
	storeUnchecked(&fsmpb.Message{Id: "bad-header", Target: "up", Payload: []byte("c"), Headers: []*fsmpb.KV{{Key: "Content-Type", Value: "text/plain\x00"}}})
	h.enqueue(t, "up", "ok-2", "d")
	testwait.ForDetail(t, 10*time.Second, "queue drained, two parked", func() (bool, string) {
		st := h.stats(t, "up")
		return st.Pending == 0 && st.Parked == 2, fmt.Sprintf("%+v", st)
	})
	parked, err := h.op.List("up", true, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(parked) != 2 || parked[0].ID != "bad\nid" || !strings.Contains(parked[0].ParkReason, "not a valid HTTP header value") ||
		parked[1].ID != "bad-header" || !strings.Contains(parked[1].ParkReason, "Content-Type") {
		t.Fatalf("parked %+v", parked)
	}
	var got []string
	for _, r := range s.requests() {
		got = append(got, r.ID)
	}
	if strings.Join(got, ",") != "ok-1,ok-2" {
		t.Fatalf("delivered %v, want ok-1 and ok-2", got)
	}
}

// holdingKind's sender holds its first holds sends (as Sparkplug does while
// the primary host is offline), then delivers.
type holdingKind struct {
	holds int
	sends chan struct{} // one per Send
}

func (k *holdingKind) Validate(Target) error { return nil }
func (k *holdingKind) NewSender(Target, SenderEnv) (Sender, error) {
	return &holdingSender{k: k}, nil
}

type holdingSender struct {
	k *holdingKind
	n int
}

type holdErr struct{}

func (holdErr) Error() string { return "the receiver's side says wait" }
func (holdErr) Verdict() Verdict {
	return Verdict{Code: "held", Hold: true, RetryAfter: time.Millisecond}
}

func (s *holdingSender) Send(context.Context, []*Message) error {
	s.k.sends <- struct{}{}
	s.n++
	if s.n <= s.k.holds {
		return holdErr{}
	}
	return nil
}
func (s *holdingSender) Close() {}

// A held send is not a failed attempt: it neither counts toward
// max_attempts nor parks, however long the hold. A Sparkplug target's
// messages were parked after max_attempts seconds of the primary host
// being offline.
func TestHeldSendIsNotAFailedAttempt(t *testing.T) {
	k := &holdingKind{holds: 8, sends: make(chan struct{}, 100)}
	h := newHarnessWith(t, activeState(1, 1), func(o *DelivererOptions) { o.Kinds = map[string]Kind{"holding": k} })
	tg := fastTarget("up", "")
	tg.Kind, tg.MaxAttempts = "holding", 2
	if err := h.d.SetTargets([]Target{tg}); err != nil {
		t.Fatal(err)
	}
	h.enqueue(t, "up", "m1", "x")
	testwait.ForDetail(t, 10*time.Second, "the message delivered or parked", func() (bool, string) {
		st := h.stats(t, "up")
		return st.Pending == 0, fmt.Sprintf("%+v", st)
	})
	if st := h.stats(t, "up"); st.Parked != 0 || st.Delivered != 1 {
		t.Fatalf("%+v: a held message was parked", st)
	}
	if n := len(k.sends); n != 9 {
		t.Fatalf("%d sends, want 8 held and 1 delivered", n)
	}
	if got := h.p.commands(func(c *fsmpb.Command) bool { return c.GetSfAttempts() != nil }); len(got) != 0 {
		t.Fatalf("%d SFAttempts commands for held sends: %v", len(got), got)
	}
}
