package storeforward

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/clock/clocktest"
	"github.com/scadad/scadad/internal/testwait"
)

// holdFirst makes p block the first SFEnqueue it sees until release is
// closed, so the enqueuer has a batch in flight for as long as a test needs.
func holdFirst(p *applyProposer) (held <-chan struct{}, release func()) {
	var once sync.Once
	heldCh, releaseCh := make(chan struct{}), make(chan struct{})
	p.before = func(ctx context.Context, cmd *fsmpb.Command) error {
		if cmd.GetSfEnqueue() == nil {
			return nil
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil
		}
		close(heldCh)
		select {
		case <-releaseCh:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return heldCh, func() { close(releaseCh) }
}

// enqueueAsync enqueues one message to target "up" in the background; the
// channel gets its error.
func enqueueAsync(e *Enqueuer, id string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := e.Enqueue(context.Background(), "up", []byte(id), id, nil)
		done <- err
	}()
	return done
}

func TestEnqueueGroupCommitsConcurrentCalls(t *testing.T) {
	f := newFSM(t, true)
	p := &applyProposer{f: f}
	clock := clocktest.New(time.Now()) // the delay timer never fires: batches close by size only
	const perBatch, total = 50, 200
	e, err := NewEnqueuer(EnqueuerOptions{
		Proposer: p, Targets: StaticTargets{"up": {Name: "up", URL: "http://127.0.0.1:1"}},
		MaxBatchMessages: perBatch, MaxInFlight: 2, Clock: clock, Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// A lone message on an idle enqueuer goes at once; held in flight, it
	// keeps the pipeline busy, so the concurrent calls below are batched.
	held, release := holdFirst(p)
	lone := enqueueAsync(e, "lone")
	<-held
	var wg sync.WaitGroup
	errs := make(chan error, total)
	for i := 0; i < total; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res, err := e.Enqueue(context.Background(), "up", []byte(fmt.Sprintf("payload %d", i)), fmt.Sprintf("m%03d", i), nil)
			if err == nil && (res.Duplicate || res.ID != fmt.Sprintf("m%03d", i)) {
				err = fmt.Errorf("m%03d: result %+v", i, res)
			}
			errs <- err
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	release()
	if err := <-lone; err != nil {
		t.Fatal(err)
	}
	cmds := p.commands(isEnqueue)
	if len(cmds) != 1+total/perBatch {
		t.Fatalf("%d SFEnqueue commands for 1+%d enqueues, want %d", len(cmds), total, 1+total/perBatch)
	}
	for _, c := range cmds {
		n := len(c.GetSfEnqueue().Messages)
		if lone := c.GetSfEnqueue().Messages[0].Id == "lone"; lone && n != 1 || !lone && n != perBatch {
			t.Errorf("a command carried %d messages (first %s), want %d", n, c.GetSfEnqueue().Messages[0].Id, perBatch)
		}
		if c.StampUnixNano == 0 {
			t.Error("command not stamped")
		}
	}
	st, _ := f.SFStats()
	if st["up"].Pending != total+1 {
		t.Fatalf("pending = %d, want %d", st["up"].Pending, total+1)
	}
}

func TestEnqueueWaitsForCompanyOnlyWhileBusy(t *testing.T) {
	f := newFSM(t, true)
	p := &applyProposer{f: f}
	clock := clocktest.New(time.Now())
	e, err := NewEnqueuer(EnqueuerOptions{Proposer: p, Targets: StaticTargets{"up": {Name: "up", URL: "http://x"}}, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// Idle: no timer needs to fire.
	held, release := holdFirst(p)
	first := enqueueAsync(e, "first")
	<-held
	// Busy: the next lone message waits for the delay timer.
	second := enqueueAsync(e, "second")
	testwait.For(t, 5*time.Second, "the batch timer", func() bool {
		return clock.Waiting() == 1
	})

	if n := len(p.commands(isEnqueue)); n != 0 {
		t.Fatalf("%d commands committed while the first was held", n)
	}
	select {
	case err := <-second:
		t.Fatalf("second enqueue returned before its batch was sent: %v", err)
	default:
	}
	clock.FireAll()
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := len(p.commands(isEnqueue)); n != 2 {
		t.Fatalf("%d commands, want 2", n)
	}
}

func TestEnqueueDuplicateIDStoredOnce(t *testing.T) {
	f := newFSM(t, true)
	p := &applyProposer{f: f}
	clock := clocktest.New(time.Now())
	ids := []string{"gen-1", "gen-2"}
	var idMu sync.Mutex
	e, err := NewEnqueuer(EnqueuerOptions{Proposer: p, Targets: StaticTargets{"up": {Name: "up", URL: "http://x"}}, Clock: clock,
		NewID: func() string { idMu.Lock(); defer idMu.Unlock(); id := ids[0]; ids = ids[1:]; return id }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	// Two concurrent enqueues of one id land in one batch (one is held in
	// flight first, so the batch waits for company).
	held, release := holdFirst(p)
	holder := enqueueAsync(e, "holder")
	<-held
	results := make(chan EnqueueResult, 2)
	for i := 0; i < 2; i++ {
		go func() {
			res, err := e.Enqueue(context.Background(), "up", []byte("same"), "dup", nil)
			if err != nil {
				t.Error(err)
			}
			results <- res
		}()
	}
	testwait.For(t, 5*time.Second, "both enqueues in the loop", func() bool {
		return clock.Waiting() == 1
	})

	// The second may still be on its way into the batch; fire until both
	// answered.
	var got []EnqueueResult
	for len(got) < 2 {
		clock.FireAll()
		select {
		case r := <-results:
			got = append(got, r)
		case <-time.After(5 * time.Millisecond):
		}
	}
	dups := 0
	for _, r := range got {
		if r.ID != "dup" {
			t.Fatalf("result id %q", r.ID)
		}
		if r.Duplicate {
			dups++
		}
	}
	if dups != 1 {
		t.Fatalf("%d of 2 concurrent enqueues of one id were duplicates, want 1", dups)
	}
	release()
	if err := <-holder; err != nil {
		t.Fatal(err)
	}

	// A later enqueue of the same id is a duplicate too.
	later := make(chan EnqueueResult, 1)
	go func() {
		res, err := e.Enqueue(context.Background(), "up", []byte("same"), "dup", nil)
		if err != nil {
			t.Error(err)
		}
		later <- res
	}()
	var res EnqueueResult
	for done := false; !done; {
		clock.FireAll()
		select {
		case res = <-later:
			done = true
		case <-time.After(5 * time.Millisecond):
		}
	}
	if !res.Duplicate {
		t.Fatal("re-enqueue of a stored id was not a duplicate")
	}
	st, _ := f.SFStats()
	if st["up"].Pending != 2 {
		t.Fatalf("pending = %d, want 2 (holder and dup)", st["up"].Pending)
	}

	// No id given: the injected generator names the message.
	gen := make(chan EnqueueResult, 1)
	go func() {
		res, _ := e.Enqueue(context.Background(), "up", []byte("x"), "", nil)
		gen <- res
	}()
	for done := false; !done; {
		clock.FireAll()
		select {
		case res = <-gen:
			done = true
		case <-time.After(5 * time.Millisecond):
		}
	}
	if res.ID != "gen-1" || res.Duplicate {
		t.Fatalf("generated id result %+v, want gen-1", res)
	}
}

func TestEnqueueRefusals(t *testing.T) {
	f := newFSM(t, true)
	p := &applyProposer{f: f}
	targets := StaticTargets{
		"alpha": {Name: "alpha", URL: "http://x", MaxPayloadBytes: 10},
		"beta":  {Name: "beta", URL: "http://y"},
	}
	e, err := NewEnqueuer(EnqueuerOptions{Proposer: p, Targets: targets})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cases := []struct {
		name    string
		target  string
		payload string
		id      string
		headers []Header
		check   func(error) bool
	}{
		{"unknown target lists the known ones", "gamma", "x", "", nil, func(err error) bool {
			var u *UnknownTargetError
			return errors.As(err, &u) && u.Target == "gamma" && strings.Join(u.Known, ",") == "alpha,beta"
		}},
		{"payload over the target limit", "alpha", "01234567890", "", nil, func(err error) bool {
			var tb *PayloadTooLargeError
			return errors.As(err, &tb) && tb.Size == 11 && tb.Limit == 10
		}},
		{"id too long", "beta", "x", strings.Repeat("i", 513), nil, func(err error) bool { return errors.Is(err, ErrInvalid) }},
		{"reserved header", "beta", "x", "", []Header{{Key: "idempotency-key", Value: "v"}}, func(err error) bool { return errors.Is(err, ErrInvalid) }},
		{"empty header name", "beta", "x", "", []Header{{Key: "", Value: "v"}}, func(err error) bool { return errors.Is(err, ErrInvalid) }},
		// What delivery could never send in an HTTP header is refused
		// here, not stored to be parked later.
		{"id with a line feed", "beta", "x", "a\nb", nil, func(err error) bool {
			return errors.Is(err, ErrInvalid) && strings.Contains(err.Error(), "not a valid HTTP header value")
		}},
		{"id with DEL", "beta", "x", "a\x7fb", nil, func(err error) bool { return errors.Is(err, ErrInvalid) }},
		{"id with NUL", "beta", "x", "a\x00b", nil, func(err error) bool { return errors.Is(err, ErrInvalid) }},
		{"header name with a space", "beta", "x", "", []Header{{Key: "Content Type", Value: "v"}}, func(err error) bool {
			return errors.Is(err, ErrInvalid) && strings.Contains(err.Error(), "not a valid HTTP header name")
		}},
		{"header value with a carriage return", "beta", "x", "", []Header{{Key: "Content-Type", Value: "a\rb"}}, func(err error) bool {
			return errors.Is(err, ErrInvalid) && strings.Contains(err.Error(), "Content-Type")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.Enqueue(context.Background(), c.target, []byte(c.payload), c.id, c.headers)
			if err == nil || !c.check(err) {
				t.Fatalf("error = %v", err)
			}
		})
	}
	if n := len(p.commands(isEnqueue)); n != 0 {
		t.Fatalf("%d commands proposed for refused messages", n)
	}
	// At the limit is fine.
	if _, err := e.Enqueue(context.Background(), "alpha", []byte("0123456789"), "", nil); err != nil {
		t.Fatalf("payload at the limit: %v", err)
	}
	// A tab and bytes past ASCII are valid in a header value.
	if _, err := e.Enqueue(context.Background(), "beta", []byte("x"), "tab\tand é", nil); err != nil {
		t.Fatalf("id with a tab and UTF-8: %v", err)
	}
}

func TestEnqueueUnavailable(t *testing.T) {
	f := newFSM(t, true)
	p := &applyProposer{f: f}
	p.down.Store(true)
	e, err := NewEnqueuer(EnqueuerOptions{Proposer: p, Targets: StaticTargets{"up": {Name: "up", URL: "http://x"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	_, err = e.Enqueue(context.Background(), "up", []byte("x"), "a", nil)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, errNoLeader) {
		t.Fatalf("error = %v, want ErrUnavailable wrapping the proposer's error", err)
	}
	p.down.Store(false)
	res, err := e.Enqueue(context.Background(), "up", []byte("x"), "a", nil)
	if err != nil || res.Duplicate {
		t.Fatalf("after recovery: %+v %v", res, err)
	}
}

func TestEnqueueClosed(t *testing.T) {
	f := newFSM(t, true)
	e, err := NewEnqueuer(EnqueuerOptions{Proposer: &applyProposer{f: f}, Targets: StaticTargets{"up": {Name: "up", URL: "http://x"}}})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	if _, err := e.Enqueue(context.Background(), "up", []byte("x"), "a", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("error = %v, want ErrClosed", err)
	}
}

// poisonProposer refuses, as the FSM would, any SFEnqueue that carries the
// id "poison"; everything else goes to next.
type poisonProposer struct{ next *applyProposer }

func (p poisonProposer) Propose(ctx context.Context, cmd *fsmpb.Command) (*fsm.Result, error) {
	for _, m := range cmd.GetSfEnqueue().GetMessages() {
		if m.Id == "poison" {
			return &fsm.Result{Err: &fsm.CommandError{Code: fsm.CodeInvalid, Message: "poison"}}, nil
		}
	}
	return p.next.Propose(ctx, cmd)
}

func TestEnqueueRefusedBatchFailsOnlyTheBadMessage(t *testing.T) {
	f := newFSM(t, true)
	inner := &applyProposer{f: f}
	e, err := NewEnqueuer(EnqueuerOptions{Proposer: poisonProposer{next: inner}, Targets: StaticTargets{"up": {Name: "up", URL: "http://x"}},
		MaxBatchMessages: 3, Clock: clocktest.New(time.Now()), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// Hold one message in flight so the three below fill one batch.
	held, release := holdFirst(inner)
	holder := enqueueAsync(e, "holder")
	<-held
	errs := make(map[string]error)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range []string{"good-1", "poison", "good-2"} {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			_, err := e.Enqueue(context.Background(), "up", []byte("x"), id, nil)
			mu.Lock()
			errs[id] = err
			mu.Unlock()
		}(id)
	}
	wg.Wait()
	if errs["good-1"] != nil || errs["good-2"] != nil {
		t.Fatalf("good messages failed with the bad one: %v", errs)
	}
	if !errors.Is(errs["poison"], ErrInvalid) || !errors.Is(errs["poison"], fsm.ErrInvalid) {
		t.Fatalf("poison error = %v", errs["poison"])
	}
	release()
	if err := <-holder; err != nil {
		t.Fatal(err)
	}
	if n := len(inner.commands(func(c *fsmpb.Command) bool { return len(c.GetSfEnqueue().GetMessages()) == 1 })); n != 3 {
		t.Fatalf("%d one-message commands, want 3 (the holder, then the refused batch's good messages one by one)", n)
	}
	st, _ := f.SFStats()
	if st["up"].Pending != 3 {
		t.Fatalf("pending = %d, want 3", st["up"].Pending)
	}
}

func TestTimeOrderedIDsSortByTime(t *testing.T) {
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	prev := ""
	seen := map[string]bool{}
	for _, d := range []time.Duration{0, 0, time.Nanosecond, time.Microsecond, time.Second, 24 * time.Hour, 30 * 365 * 24 * time.Hour} {
		id := TimeOrderedID(base.Add(d))
		if len(id) != 32 {
			t.Fatalf("id %q: %d characters, want 32", id, len(id))
		}
		if seen[id] {
			t.Fatalf("id %q made twice", id)
		}
		seen[id] = true
		if d > 0 && id <= prev {
			t.Fatalf("id %q at +%v does not sort after %q", id, d, prev)
		}
		prev = id
	}
}

// One caller submits many messages before waiting for any: they share
// commands, and each Wait gives its own message's outcome.
func TestSubmitPipelinesOneCallersMessages(t *testing.T) {
	f := newFSM(t, true)
	p := &applyProposer{f: f}
	clock := clocktest.New(time.Now())
	const total = 40
	e, err := NewEnqueuer(EnqueuerOptions{
		Proposer: p, Targets: StaticTargets{"up": {Name: "up", URL: "http://127.0.0.1:1"}},
		MaxBatchMessages: total, MaxInFlight: 1, Clock: clock, Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	held, release := holdFirst(p)
	var pending []*Pending
	for i := range total {
		pp, err := e.Submit(context.Background(), "up", []byte("x"), fmt.Sprintf("m%02d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, pp)
		if i == 0 {
			<-held // the first goes alone; the rest gather behind it
		}
	}
	if pp, err := e.Submit(context.Background(), "nowhere", []byte("x"), "bad", nil); err == nil || pp.ID() != "bad" {
		t.Fatalf("Submit to an unknown target: %v, id %q; want a refusal naming the id", err, pp.ID())
	}
	release()
	for i := len(pending) - 1; i >= 0; i-- { // waiting in any order
		res, err := pending[i].Wait(context.Background())
		if err != nil || res.ID != fmt.Sprintf("m%02d", i) || res.Duplicate {
			t.Fatalf("message %d: %+v, %v", i, res, err)
		}
	}
	if cmds := p.commands(isEnqueue); len(cmds) != 2 || len(cmds[1].GetSfEnqueue().Messages) != total-1 {
		t.Fatalf("%d SFEnqueue commands, want 2: the first message, then the %d submitted behind it", len(cmds), total-1)
	}
}

type callerKey struct{}

// A lone Enqueue on an idle enqueuer is proposed by its caller, under the
// caller's context (no hand-over to the batching loop and back); Close
// still aborts it, and the next message is batched again once the slot is
// free.
func TestLoneEnqueueIsProposedByItsCaller(t *testing.T) {
	f := newFSM(t, true)
	p := &applyProposer{f: f}
	seen := make(chan any, 2)
	p.before = func(ctx context.Context, cmd *fsmpb.Command) error {
		seen <- ctx.Value(callerKey{})
		return nil
	}
	e, err := NewEnqueuer(EnqueuerOptions{Proposer: p, Targets: StaticTargets{"up": {Name: "up", URL: "http://x"}}, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.WithValue(context.Background(), callerKey{}, "producer-1")
	if res, err := e.Enqueue(ctx, "up", []byte("x"), "lone", nil); err != nil || res.ID != "lone" || res.Duplicate {
		t.Fatalf("Enqueue = %+v, %v", res, err)
	}
	if v := <-seen; v != "producer-1" {
		t.Fatalf("the lone message was proposed under a context without the caller's value (%v): it went through the batching loop", v)
	}
	// Submit always goes through the loop, and finds the slot free.
	pend, err := e.Submit(ctx, "up", []byte("y"), "submitted", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pend.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if v := <-seen; v != nil {
		t.Fatalf("a submitted message was proposed under the caller's context (%v)", v)
	}
	if st, _ := f.SFStats(); st["up"].Pending != 2 {
		t.Fatalf("pending = %d, want 2", st["up"].Pending)
	}
}

// Close aborts a lone caller's propose, as it aborts a batch's.
func TestCloseAbortsALoneEnqueue(t *testing.T) {
	f := newFSM(t, true)
	p := &applyProposer{f: f}
	held, release := holdFirst(p)
	defer release()
	e, err := NewEnqueuer(EnqueuerOptions{Proposer: p, Targets: StaticTargets{"up": {Name: "up", URL: "http://x"}}, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	lone := enqueueAsync(e, "lone")
	<-held
	closed := make(chan struct{})
	go func() { e.Close(); close(closed) }()
	select {
	case err := <-lone:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error = %v, want the propose cancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not abort the lone enqueue's propose")
	}
	<-closed
}

// A propose that its caller stops waiting for stays in flight: raft has
// the entry and commits it whether or not anyone waits. The in-flight
// slots must bound those entries, so callers that give up at once cannot
// put more proposals in flight than MaxInFlight by enqueueing again
// alone.
func TestCallersGivingUpDoNotPutMoreProposalsInFlight(t *testing.T) {
	f := newFSM(t, true)
	p := &applyProposer{f: f}
	const maxInFlight = 1
	var (
		mu             sync.Mutex
		inFlight, most int
	)
	entered, answer := make(chan struct{}, 16), make(chan struct{})
	p.before = func(ctx context.Context, cmd *fsmpb.Command) error {
		if cmd.GetSfEnqueue() == nil {
			return nil
		}
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		go func() { // like raft: the entry is answered when it commits
			<-answer
			mu.Lock()
			inFlight--
			mu.Unlock()
		}()
		entered <- struct{}{}
		select {
		case <-answer:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	e, err := NewEnqueuer(EnqueuerOptions{Proposer: p, Targets: StaticTargets{"up": {Name: "up", URL: "http://x"}},
		MaxInFlight: maxInFlight, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	// The first caller is proposed alone and gives up while it is in flight.
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := e.Enqueue(ctx, "up", []byte("x"), "gave-up-0", nil)
		first <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first enqueue was not proposed")
	}
	cancel()
	select {
	case err := <-first:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("first caller: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first caller did not return when it gave up")
	}
	// More callers that have already given up.
	gone, cancelAll := context.WithCancel(context.Background())
	cancelAll()
	for i := 1; i <= 8; i++ {
		if _, err := e.Enqueue(gone, "up", []byte("x"), fmt.Sprintf("gave-up-%d", i), nil); err == nil {
			t.Fatalf("caller %d: no error with its context cancelled", i)
		}
	}
	mu.Lock()
	got := most
	mu.Unlock()
	if got > maxInFlight {
		t.Fatalf("%d proposals in flight at once, MaxInFlight %d", got, maxInFlight)
	}

	// Once raft answers, the slot is free and enqueues go on.
	close(answer)
	ok, cancelOK := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelOK()
	if _, err := e.Enqueue(ok, "up", []byte("x"), "after", nil); err != nil {
		t.Fatalf("enqueue after the answer: %v", err)
	}
}
