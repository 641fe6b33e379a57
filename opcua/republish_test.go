package opcua

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/internal/testwait"
)

// The retransmission queue (Part 4, 5.13.1.1, 5.13.5, 5.13.6): a sent
// NotificationMessage is kept until a later Publish request acknowledges
// it, listed in AvailableSequenceNumbers, and given back by Republish.

// publishAcks is publish with the request's SubscriptionAcknowledgements.
func (f *subFixture) publishAcks(session uint32, acks ...*ua.SubscriptionAcknowledgement) uint32 {
	f.t.Helper()
	f.reqID++
	resp, err := f.m.publish(nil, &ua.PublishRequest{RequestHeader: header(session), SubscriptionAcknowledgements: acks}, f.reqID)
	if err != nil || resp != nil {
		f.t.Fatalf("publish answered at once: %+v %v", resp, err)
	}
	return f.reqID
}

// republish asks for sequence number seq of sub; a non-OK service result
// is returned as the code.
func (f *subFixture) republish(session, sub, seq uint32) (*ua.NotificationMessage, ua.StatusCode) {
	f.t.Helper()
	resp, err := f.m.republish(nil, &ua.RepublishRequest{RequestHeader: header(session), SubscriptionID: sub, RetransmitSequenceNumber: seq}, 0)
	var code ua.StatusCode
	switch {
	case errors.As(err, &code):
		return nil, code
	case err != nil:
		f.t.Fatalf("republish %d/%d: %v", sub, seq, err)
	}
	rr, ok := resp.(*ua.RepublishResponse)
	if !ok {
		f.t.Fatalf("republish %d/%d answered %T", sub, seq, resp)
	}
	return rr.NotificationMessage, ua.StatusOK
}

// change sets nodeA to v and tells the engine.
func (f *subFixture) change(v float64) {
	f.nodes.set(nodeA, v, ua.StatusOK, f.clock.Now())
	f.m.changed(nodeA)
}

func encoded(t *testing.T, msg *ua.NotificationMessage) []byte {
	t.Helper()
	b, err := ua.Encode(msg)
	if err != nil {
		t.Fatalf("encode notification message: %v", err)
	}
	return b
}

func ack(sub, seq uint32) *ua.SubscriptionAcknowledgement {
	return &ua.SubscriptionAcknowledgement{SubscriptionID: sub, SequenceNumber: seq}
}

func TestRetransmissionQueue(t *testing.T) {
	f := newSubFixture(t)
	sub := f.createSub(1, 100, 10, 1000)
	f.monitor(1, sub, nodeA)

	// Two messages, neither acknowledged: both available.
	first := f.publishAcks(1)
	f.step(interval)
	pr1, values := dataOf(t, f.answer(first))
	if pr1.NotificationMessage.SequenceNumber != 1 || values[1].Value.Value() != 1.0 {
		t.Fatalf("first message: %+v", pr1.NotificationMessage)
	}
	if !slices.Equal(pr1.AvailableSequenceNumbers, []uint32{1}) {
		t.Fatalf("available after the first message: %v, want [1]", pr1.AvailableSequenceNumbers)
	}
	f.change(2)
	second := f.publishAcks(1)
	f.step(interval)
	pr2, _ := dataOf(t, f.answer(second))
	if pr2.NotificationMessage.SequenceNumber != 2 || !slices.Equal(pr2.AvailableSequenceNumbers, []uint32{1, 2}) {
		t.Fatalf("second message %d, available %v, want 2 and [1 2]", pr2.NotificationMessage.SequenceNumber, pr2.AvailableSequenceNumbers)
	}

	// Republish gives back the very messages sent.
	for _, sentMsg := range []*ua.NotificationMessage{pr1.NotificationMessage, pr2.NotificationMessage} {
		got, code := f.republish(1, sub, sentMsg.SequenceNumber)
		if code != ua.StatusOK {
			t.Fatalf("republish %d: %v", sentMsg.SequenceNumber, code)
		}
		if !bytes.Equal(encoded(t, got), encoded(t, sentMsg)) {
			t.Fatalf("republish %d: %+v, sent %+v", sentMsg.SequenceNumber, got, sentMsg)
		}
	}
	if _, code := f.republish(1, sub, 3); code != ua.StatusBadMessageNotAvailable {
		t.Fatalf("republish of a number never sent: %v", code)
	}
	if _, code := f.republish(1, sub+1, 1); code != ua.StatusBadSubscriptionIDInvalid {
		t.Fatalf("republish of an unknown subscription: %v", code)
	}

	// Acknowledgements: each has its result, in order.
	f.change(3)
	third := f.publishAcks(1, ack(sub, 1), ack(sub, 99), ack(sub+1, 2), ack(sub, 1))
	f.step(interval)
	pr3, _ := dataOf(t, f.answer(third))
	want := []ua.StatusCode{ua.StatusOK, ua.StatusBadSequenceNumberUnknown, ua.StatusBadSubscriptionIDInvalid, ua.StatusBadSequenceNumberUnknown}
	if !slices.Equal(pr3.Results, want) {
		t.Fatalf("acknowledgement results %v, want %v", pr3.Results, want)
	}
	if !slices.Equal(pr3.AvailableSequenceNumbers, []uint32{2, 3}) {
		t.Fatalf("available after acknowledging 1: %v, want [2 3]", pr3.AvailableSequenceNumbers)
	}
	if _, code := f.republish(1, sub, 1); code != ua.StatusBadMessageNotAvailable {
		t.Fatalf("republish of an acknowledged message: %v", code)
	}

	// A keep-alive lists what is still available too.
	keepAlive := f.publishAcks(1, ack(sub, 2))
	for range 10 {
		f.step(interval)
	}
	pr4, values := dataOf(t, f.answer(keepAlive))
	if len(values) != 0 || !slices.Equal(pr4.Results, []ua.StatusCode{ua.StatusOK}) || !slices.Equal(pr4.AvailableSequenceNumbers, []uint32{3}) {
		t.Fatalf("keep-alive: results %v, available %v, %d values", pr4.Results, pr4.AvailableSequenceNumbers, len(values))
	}

	// Another session cannot acknowledge or republish them.
	f.createSub(2, 100, 10, 1000)
	other := f.publishAcks(2, ack(sub, 3))
	f.step(interval)
	if pr, _ := dataOf(t, f.answer(other)); !slices.Equal(pr.Results, []ua.StatusCode{ua.StatusBadSubscriptionIDInvalid}) {
		t.Fatalf("another session's acknowledgement: %v", pr.Results)
	}
	if _, code := f.republish(2, sub, 3); code != ua.StatusBadSubscriptionIDInvalid {
		t.Fatalf("another session's republish: %v", code)
	}
	if _, code := f.republish(1, sub, 3); code != ua.StatusOK {
		t.Fatalf("republish after another session tried: %v", code)
	}
}

// A client that never acknowledges holds at most retainPerSub messages
// per subscription; the oldest go first, counted.
func TestRetransmissionQueueBound(t *testing.T) {
	f := newSubFixture(t)
	sub := f.createSub(1, 100, 10, 1000)
	f.monitor(1, sub, nodeA)
	const extra = 5
	var last *ua.PublishResponse
	for i := range maxRetainedPerSubscription + extra {
		f.change(float64(100 + i))
		id := f.publishAcks(1)
		f.step(interval)
		last, _ = dataOf(t, f.answer(id))
	}
	total := uint32(maxRetainedPerSubscription + extra)
	if last.NotificationMessage.SequenceNumber != total {
		t.Fatalf("last sequence number %d, want %d", last.NotificationMessage.SequenceNumber, total)
	}
	avail := last.AvailableSequenceNumbers
	if len(avail) != maxRetainedPerSubscription || avail[0] != extra+1 || avail[len(avail)-1] != total {
		t.Fatalf("available %v: want the last %d, %d to %d", avail, maxRetainedPerSubscription, extra+1, total)
	}
	if got := metricValue(t, f.metrics.unacksDropped); got != extra {
		t.Fatalf("dropped counter %v, want %d", got, extra)
	}
	if _, code := f.republish(1, sub, extra); code != ua.StatusBadMessageNotAvailable {
		t.Fatalf("republish of a dropped message: %v", code)
	}
	if _, code := f.republish(1, sub, extra+1); code != ua.StatusOK {
		t.Fatalf("republish of the oldest kept: %v", code)
	}

	// Deleting the subscription lets go of what it kept.
	if _, err := f.m.deleteSubscriptions(nil, &ua.DeleteSubscriptionsRequest{RequestHeader: header(1), SubscriptionIDs: []uint32{sub}}, 0); err != nil {
		t.Fatal(err)
	}
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.m.retainedBytes != 0 {
		t.Fatalf("%d bytes kept after the subscription was deleted", f.m.retainedBytes)
	}
}

// Many subscriptions of one session, each under its own count bound,
// cannot together keep more than the session's byte bound, nor all
// sessions more than the engine's.
func TestRetransmissionQueueByteBounds(t *testing.T) {
	big := strings.Repeat("x", 10<<10)
	for _, tt := range []struct {
		name           string
		session, total int
	}{
		{"session", 100 << 10, 1 << 30},
		{"engine", 1 << 30, 150 << 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newSubFixture(t)
			f.m.limits.retainSessionBytes, f.m.limits.retainTotalBytes = tt.session, tt.total
			f.nodes.set(nodeB, big, ua.StatusOK, f.clock.Now())
			var subs []uint32
			for s := range uint32(2) {
				for range 3 {
					sub := f.createSub(s+1, 100, 10, 1000)
					f.monitor(s+1, sub, nodeB)
					subs = append(subs, sub)
				}
			}
			for round := range 10 {
				f.nodes.set(nodeB, fmt.Sprint(round)+big, ua.StatusOK, f.clock.Now())
				f.m.changed(nodeB)
				var ids []uint32
				for s := range uint32(2) {
					for range 3 {
						ids = append(ids, f.publishAcks(s+1))
					}
				}
				f.step(interval)
				for _, id := range ids {
					f.answer(id)
				}
			}
			f.m.mu.Lock()
			defer f.m.mu.Unlock()
			var sum int
			for _, sess := range f.m.sessions {
				if sess.retainedBytes > f.m.limits.retainSessionBytes {
					t.Errorf("a session keeps %d bytes, bound %d", sess.retainedBytes, f.m.limits.retainSessionBytes)
				}
				sum += sess.retainedBytes
			}
			if sum != f.m.retainedBytes || sum > f.m.limits.retainTotalBytes {
				t.Errorf("sessions keep %d bytes, engine counts %d, bound %d", sum, f.m.retainedBytes, f.m.limits.retainTotalBytes)
			}
			if metricValue(t, f.metrics.unacksDropped) == 0 {
				t.Error("nothing dropped counted")
			}
			// Every subscription still has its newest message.
			for _, sub := range subs {
				s := f.m.subs[sub]
				if len(s.retained) == 0 || s.retained[len(s.retained)-1].msg.SequenceNumber != s.seq {
					t.Errorf("subscription %d lost its newest message", sub)
				}
			}
		})
	}
}

// A client whose Publish answer never arrived (it gave up waiting; the
// server sent it anyway) sees the gap in the next answer's sequence
// number and AvailableSequenceNumbers, and gets the lost message back with
// Republish: through a real server, secure channel and gopcua client.
func TestRepublishRecoversLostPublishAnswer(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	c := connect(t, ts.Endpoint())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	created, err := send[*ua.CreateSubscriptionResponse](ctx, c, &ua.CreateSubscriptionRequest{RequestedPublishingInterval: 50, RequestedMaxKeepAliveCount: 1000, RequestedLifetimeCount: 10000, PublishingEnabled: true})
	if err != nil {
		t.Fatalf("create subscription: %v", err)
	}
	sub := created.SubscriptionID
	speed := ts.NodeID("Pump1", "Speed")
	if err := ts.TagUpdate("Pump1", "Speed", 1.0, ua.StatusOK, time.Now()); err != nil {
		t.Fatal(err)
	}
	items, err := send[*ua.CreateMonitoredItemsResponse](ctx, c, &ua.CreateMonitoredItemsRequest{SubscriptionID: sub, TimestampsToReturn: ua.TimestampsToReturnBoth,
		ItemsToCreate: []*ua.MonitoredItemCreateRequest{gopcua.NewMonitoredItemCreateRequestWithDefaults(speed, ua.AttributeIDValue, 7)}})
	if err != nil || items.Results[0].StatusCode != ua.StatusOK {
		t.Fatalf("create monitored item: %v %+v", err, items)
	}
	publish := func(acks ...*ua.SubscriptionAcknowledgement) *ua.PublishResponse {
		t.Helper()
		r, err := send[*ua.PublishResponse](ctx, c, &ua.PublishRequest{SubscriptionAcknowledgements: append([]*ua.SubscriptionAcknowledgement{}, acks...)})
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		return r
	}

	// The initial value, received.
	got := publish()
	if got.NotificationMessage.SequenceNumber != 1 || speedOf(t, got.NotificationMessage) != 1.0 {
		t.Fatalf("first message: %+v", got.NotificationMessage)
	}

	// The next answer is lost: the client stops waiting for it while the
	// server still holds the request, then the value changes.
	lostCtx, lose := context.WithCancel(ctx)
	lost := make(chan error, 1)
	go func() {
		lost <- c.Send(lostCtx, &ua.PublishRequest{SubscriptionAcknowledgements: []*ua.SubscriptionAcknowledgement{ack(sub, 1)}}, func(ua.Response) error { return nil })
	}()
	testwait.For(t, 5*time.Second, "the server to hold the Publish request", func() bool { return publishHeld(ts) })
	lose()
	if err := <-lost; !errors.Is(err, context.Canceled) {
		t.Fatalf("the abandoned Publish ended with %v, want context.Canceled", err)
	}
	if err := ts.TagUpdate("Pump1", "Speed", 42.0, ua.StatusOK, time.Now()); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "the server to answer the abandoned Publish", func() bool { return !publishQueued(ts) })

	// The next answer shows the gap; 2 is still available.
	if err := ts.TagUpdate("Pump1", "Speed", 43.0, ua.StatusOK, time.Now()); err != nil {
		t.Fatal(err)
	}
	got = publish()
	if got.NotificationMessage.SequenceNumber != 3 || !slices.Equal(got.AvailableSequenceNumbers, []uint32{2, 3}) {
		t.Fatalf("after the lost answer: sequence number %d, available %v; want 3 and [2 3]", got.NotificationMessage.SequenceNumber, got.AvailableSequenceNumbers)
	}
	again, err := send[*ua.RepublishResponse](ctx, c, &ua.RepublishRequest{SubscriptionID: sub, RetransmitSequenceNumber: 2})
	if err != nil {
		t.Fatalf("republish of the lost message: %v", err)
	}
	if again.NotificationMessage.SequenceNumber != 2 || speedOf(t, again.NotificationMessage) != 42.0 {
		t.Fatalf("republished: %+v", again.NotificationMessage)
	}

	// Acknowledged, it is gone.
	if err := ts.TagUpdate("Pump1", "Speed", 44.0, ua.StatusOK, time.Now()); err != nil {
		t.Fatal(err)
	}
	got = publish(ack(sub, 2), ack(sub, 3))
	if !slices.Equal(got.Results, []ua.StatusCode{ua.StatusOK, ua.StatusOK}) || !slices.Equal(got.AvailableSequenceNumbers, []uint32{4}) {
		t.Fatalf("after acknowledging: results %v, available %v", got.Results, got.AvailableSequenceNumbers)
	}
	_, err = send[*ua.RepublishResponse](ctx, c, &ua.RepublishRequest{SubscriptionID: sub, RetransmitSequenceNumber: 2})
	if !errors.Is(err, ua.StatusBadMessageNotAvailable) {
		t.Fatalf("republish of an acknowledged message: %v", err)
	}
}

// publishHeld says whether a Publish request waits in a session's queue:
// the server has read it (and its acknowledgements). publishQueued is not
// that: it is also true while the previous answer's send winds up, so a
// request cancelled then may never have reached the server.
func publishHeld(ts *testServer) bool {
	ts.subs.mu.Lock()
	defer ts.subs.mu.Unlock()
	for _, s := range ts.subs.sessions {
		if len(s.queue) > 0 {
			return true
		}
	}
	return false
}

// publishQueued reports whether a session holds a Publish request, or
// its answer is still being written.
func publishQueued(ts *testServer) bool {
	ts.subs.mu.Lock()
	defer ts.subs.mu.Unlock()
	for _, s := range ts.subs.sessions {
		if len(s.queue) > 0 || len(s.outbox) > 0 || s.sending {
			return true
		}
	}
	return false
}

// speedOf is the one value of a data change message.
func speedOf(t *testing.T, msg *ua.NotificationMessage) any {
	t.Helper()
	for _, eo := range msg.NotificationData {
		if dcn, ok := eo.Value.(*ua.DataChangeNotification); ok && len(dcn.MonitoredItems) == 1 {
			return dcn.MonitoredItems[0].Value.Value.Value()
		}
	}
	t.Fatalf("no single data change in %+v", msg)
	return nil
}
