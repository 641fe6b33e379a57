package opcua

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uasc"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/clock/clocktest"
	"github.com/scadad/scadad/internal/testwait"
)

// The subscription engine on its own: a fake clock, fake node values and
// a send that records. Time moves only in step, which then ends the
// publishing intervals due, as run would.

type fakeNodes struct {
	mu     sync.Mutex
	values map[string]*ua.DataValue
}

func (f *fakeNodes) set(nid *ua.NodeID, v any, status ua.StatusCode, source time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.values[nid.String()] = &ua.DataValue{
		EncodingMask:    ua.DataValueValue | ua.DataValueStatusCode | ua.DataValueSourceTimestamp | ua.DataValueServerTimestamp,
		Value:           ua.MustVariant(v),
		Status:          status,
		SourceTimestamp: source,
		ServerTimestamp: source,
	}
}

func (f *fakeNodes) read(nid *ua.NodeID) *ua.DataValue {
	f.mu.Lock()
	defer f.mu.Unlock()
	if dv, ok := f.values[nid.String()]; ok {
		return dv
	}
	return statusValue(ua.StatusBadNodeIDUnknown, time.Time{})
}

func (f *fakeNodes) exists(nid *ua.NodeID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.values[nid.String()]
	return ok
}

type sent struct {
	reqID uint32
	resp  ua.Response
}

type sentLog struct {
	mu   sync.Mutex
	msgs []sent
	// When gate is set, each send reports on entered and waits for gate.
	gate, entered chan struct{}
}

func (l *sentLog) send(_ *uasc.SecureChannel, reqID uint32, resp ua.Response) error {
	if l.gate != nil {
		l.entered <- struct{}{}
		<-l.gate
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, sent{reqID, resp})
	return nil
}

func (l *sentLog) all() []sent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sent(nil), l.msgs...)
}

type subFixture struct {
	t       *testing.T
	m       *subscriptions
	clock   *clocktest.Fake
	nodes   *fakeNodes
	sent    *sentLog
	metrics *metrics
	reqID   uint32
}

var (
	nodeA = ua.NewStringNodeID(1, "Pump1.Speed")
	nodeB = ua.NewStringNodeID(1, "Tank1.Level")
)

func newSubFixture(t *testing.T) *subFixture {
	t.Helper()
	met, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	f := &subFixture{t: t, clock: clocktest.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)), nodes: &fakeNodes{values: map[string]*ua.DataValue{}}, sent: &sentLog{}, metrics: met}
	f.nodes.set(nodeA, 1.0, ua.StatusOK, f.clock.Now())
	f.nodes.set(nodeB, float32(2), ua.StatusOK, f.clock.Now())
	f.nodes.set(serviceLevelID, byte(250), ua.StatusOK, f.clock.Now())
	f.m = newSubscriptions(f.clock, zerolog.Nop(), met,
		subLimits{minInterval: 50 * time.Millisecond, maxInterval: time.Minute, maxPerRequest: 1000,
			retainPerSub: maxRetainedPerSubscription, retainSessionBytes: maxRetainedSessionBytes, retainTotalBytes: maxRetainedBytes},
		f.nodes.read, f.nodes.exists, func(sc *uasc.SecureChannel, id uint32, r ua.Response) error { return f.sent.send(sc, id, r) })
	t.Cleanup(f.m.close)
	return f
}

func header(session uint32) *ua.RequestHeader {
	return &ua.RequestHeader{AuthenticationToken: ua.NewNumericNodeID(0, session), RequestHandle: 7}
}

func (f *subFixture) createSub(session uint32, intervalMS float64, keepAlive, lifetime uint32) uint32 {
	f.t.Helper()
	resp, err := f.m.createSubscription(nil, &ua.CreateSubscriptionRequest{
		RequestHeader: header(session), RequestedPublishingInterval: intervalMS,
		RequestedMaxKeepAliveCount: keepAlive, RequestedLifetimeCount: lifetime, PublishingEnabled: true,
	}, 0)
	if err != nil {
		f.t.Fatalf("create subscription: %v", err)
	}
	return resp.(*ua.CreateSubscriptionResponse).SubscriptionID
}

// monitor creates one Reporting item per node; client handle i+1.
func (f *subFixture) monitor(session, sub uint32, nodes ...*ua.NodeID) []uint32 {
	f.t.Helper()
	var reqs []*ua.MonitoredItemCreateRequest
	for i, n := range nodes {
		reqs = append(reqs, gopcua.NewMonitoredItemCreateRequestWithDefaults(n, ua.AttributeIDValue, uint32(i+1)))
	}
	resp, err := f.m.createMonitoredItems(nil, &ua.CreateMonitoredItemsRequest{
		RequestHeader: header(session), SubscriptionID: sub, TimestampsToReturn: ua.TimestampsToReturnBoth, ItemsToCreate: reqs,
	}, 0)
	if err != nil {
		f.t.Fatalf("create monitored items: %v", err)
	}
	var ids []uint32
	for _, r := range resp.(*ua.CreateMonitoredItemsResponse).Results {
		if r.StatusCode != ua.StatusOK {
			f.t.Fatalf("create monitored item: %v", r.StatusCode)
		}
		ids = append(ids, r.MonitoredItemID)
	}
	return ids
}

// publish sends a Publish request; an answer given at once (a fault) is
// returned, otherwise the request waits and is answered through send.
func (f *subFixture) publish(session uint32) (uint32, ua.Response) {
	f.t.Helper()
	return f.publishHint(session, 0)
}

// publishHint is publish with the request's TimeoutHint in milliseconds.
func (f *subFixture) publishHint(session, hintMS uint32) (uint32, ua.Response) {
	f.t.Helper()
	f.reqID++
	h := header(session)
	h.TimeoutHint = hintMS
	resp, err := f.m.publish(nil, &ua.PublishRequest{RequestHeader: h}, f.reqID)
	if err != nil {
		f.t.Fatalf("publish: %v", err)
	}
	return f.reqID, resp
}

// step advances the clock and ends the intervals that came due.
func (f *subFixture) step(d time.Duration) {
	f.clock.Advance(d)
	f.m.tick(f.clock.Now())
}

// settled waits until no answer is waiting to be sent and returns all sent.
func (f *subFixture) settled() []sent {
	f.t.Helper()
	testwait.For(f.t, 5*time.Second, "the senders to finish", func() bool {
		f.m.mu.Lock()
		defer f.m.mu.Unlock()
		for _, s := range f.m.sessions {
			if s.sending || len(s.outbox) > 0 {
				return false
			}
		}
		return true
	})
	return f.sent.all()
}

// answer returns the answer to reqID, failing if there is none.
func (f *subFixture) answer(reqID uint32) ua.Response {
	f.t.Helper()
	for _, s := range f.settled() {
		if s.reqID == reqID {
			return s.resp
		}
	}
	f.t.Fatalf("publish request %d not answered", reqID)
	return nil
}

func (f *subFixture) unanswered(reqID uint32) {
	f.t.Helper()
	for _, s := range f.settled() {
		if s.reqID == reqID {
			f.t.Fatalf("publish request %d answered early: %+v", reqID, s.resp)
		}
	}
}

func dataOf(t *testing.T, r ua.Response) (*ua.PublishResponse, map[uint32]*ua.DataValue) {
	t.Helper()
	pr, ok := r.(*ua.PublishResponse)
	if !ok {
		t.Fatalf("answer is %T, want a PublishResponse", r)
	}
	values := map[uint32]*ua.DataValue{}
	for _, eo := range pr.NotificationMessage.NotificationData {
		if dcn, ok := eo.Value.(*ua.DataChangeNotification); ok {
			for _, it := range dcn.MonitoredItems {
				values[it.ClientHandle] = it.Value
			}
		}
	}
	return pr, values
}

func faultOf(r ua.Response) ua.StatusCode {
	if f, ok := r.(*ua.ServiceFault); ok {
		return f.ResponseHeader.ServiceResult
	}
	return ua.StatusOK
}

const interval = 100 * time.Millisecond

func TestKeepAlive(t *testing.T) {
	for _, keepAlive := range []uint32{1, 3, 10} {
		t.Run(fmt.Sprint(keepAlive), func(t *testing.T) {
			f := newSubFixture(t)
			sub := f.createSub(1, 100, keepAlive, 1000)

			// The first interval ends with a message, a keep-alive
			// without items, so the client knows the subscription works.
			first, _ := f.publish(1)
			f.step(interval)
			pr, values := dataOf(t, f.answer(first))
			if pr.SubscriptionID != sub || len(values) != 0 || len(pr.NotificationMessage.NotificationData) != 0 || pr.NotificationMessage.SequenceNumber != 1 {
				t.Fatalf("first message: %+v", pr)
			}

			// Then one every keepAlive empty intervals, carrying the next
			// sequence number without using it.
			for round := range 2 {
				next, _ := f.publish(1)
				for range keepAlive - 1 {
					f.step(interval)
				}
				f.unanswered(next)
				f.step(interval)
				pr, _ := dataOf(t, f.answer(next))
				if len(pr.NotificationMessage.NotificationData) != 0 || pr.NotificationMessage.SequenceNumber != 1 {
					t.Fatalf("keep-alive %d: %+v", round, pr.NotificationMessage)
				}
			}
		})
	}
}

func TestLifetimeExpiry(t *testing.T) {
	tests := []struct {
		name                string
		keepAlive, lifetime uint32
		want                uint32 // intervals without a Publish request before expiry
	}{
		{"minimum", 1, 3, 3},
		{"revised up to three keep-alives", 4, 2, 12},
		{"as asked", 2, 20, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newSubFixture(t)
			sub := f.createSub(1, 100, tt.keepAlive, tt.lifetime)
			f.monitor(1, sub, nodeA, serviceLevelID)
			for range tt.want - 1 {
				f.step(interval)
			}
			if !f.m.owns(tokenKey(ua.NewNumericNodeID(0, 1)), sub) {
				t.Fatalf("subscription gone after %d intervals, want %d", tt.want-1, tt.want)
			}
			f.step(interval)
			f.m.mu.Lock()
			subs, items, nodes := len(f.m.subs), len(f.m.items), len(f.m.byNode)
			f.m.mu.Unlock()
			if subs != 0 || items != 0 || nodes != 0 {
				t.Fatalf("after %d intervals: %d subscriptions, %d items, %d watched nodes left", tt.want, subs, items, nodes)
			}
			if got := metricValue(t, f.metrics.subsExpired); got != 1 {
				t.Fatalf("expired counter %v", got)
			}

			// The session's next Publish hears why, the one after that
			// that nothing is left.
			id, now := f.publish(1)
			if now != nil {
				t.Fatalf("publish after expiry answered at once with %+v", now)
			}
			pr, ok := f.answer(id).(*ua.PublishResponse)
			if !ok || pr.SubscriptionID != sub || len(pr.NotificationMessage.NotificationData) != 1 {
				t.Fatalf("status change: %+v", pr)
			}
			if sc, ok := pr.NotificationMessage.NotificationData[0].Value.(*ua.StatusChangeNotification); !ok || sc.Status != ua.StatusBadTimeout {
				t.Fatalf("status change: %+v", pr.NotificationMessage.NotificationData[0].Value)
			}
			if _, now := f.publish(1); faultOf(now) != ua.StatusBadNoSubscription {
				t.Fatalf("publish with nothing left: %+v", now)
			}
		})
	}
}

// A Publish request now and then keeps a subscription alive however long.
func TestPublishRequestsKeepSubscriptionAlive(t *testing.T) {
	f := newSubFixture(t)
	sub := f.createSub(1, 100, 1, 3)
	for i := range 30 {
		if i%2 == 0 {
			f.publish(1)
		}
		f.step(interval)
	}
	if !f.m.owns(tokenKey(ua.NewNumericNodeID(0, 1)), sub) {
		t.Fatal("a subscription with Publish requests every other interval expired")
	}
}

// A Publish request waits at most its TimeoutHint (then BadTimeout); a
// keep-alive due at the same moment uses it first.
func TestPublishTimeoutHint(t *testing.T) {
	for _, tt := range []struct {
		name      string
		keepAlive uint32
		hintMS    uint32
		steps     int
		want      ua.StatusCode // of the answer; OK: a keep-alive
	}{
		{"times out", 100, 1000, 10, ua.StatusBadTimeout},
		{"keep-alive first", 5, 500, 5, ua.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newSubFixture(t)
			f.createSub(1, 100, tt.keepAlive, 10*tt.keepAlive)
			first, _ := f.publish(1)
			f.step(interval)
			f.answer(first)
			id, _ := f.publishHint(1, tt.hintMS)
			for range tt.steps - 1 {
				f.step(interval)
			}
			f.unanswered(id)
			f.step(interval)
			if got := faultOf(f.answer(id)); got != tt.want {
				t.Fatalf("answer %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCoalescing(t *testing.T) {
	f := newSubFixture(t)
	sub := f.createSub(1, 100, 10, 1000)
	f.monitor(1, sub, nodeA)
	t0 := f.clock.Now()
	// Three changes after the initial value, all before the interval ends.
	for i, v := range []float64{2, 3, 4} {
		f.nodes.set(nodeA, v, ua.StatusOK, t0.Add(time.Duration(i+1)*time.Second))
		f.m.changed(nodeA)
	}
	id, _ := f.publish(1)
	f.step(interval)
	pr, values := dataOf(t, f.answer(id))
	if len(values) != 1 || values[1].Value.Value() != 4.0 || !values[1].SourceTimestamp.Equal(t0.Add(3*time.Second)) || pr.NotificationMessage.SequenceNumber != 1 {
		t.Fatalf("coalesced notification: %+v %v", pr.NotificationMessage, values)
	}
	if got := metricValue(t, f.metrics.coalesced); got != 3 {
		t.Fatalf("coalesced counter %v, want 3 (the initial value and two changes replaced)", got)
	}

	// The default trigger (StatusValue) ignores a new source timestamp
	// alone; a status change is reported.
	f.nodes.set(nodeA, 4.0, ua.StatusOK, t0.Add(time.Hour))
	f.m.changed(nodeA)
	id, _ = f.publish(1)
	f.step(interval)
	f.unanswered(id)
	f.nodes.set(nodeA, 4.0, ua.StatusBad, t0.Add(time.Hour))
	f.m.changed(nodeA)
	f.step(interval)
	pr, values = dataOf(t, f.answer(id))
	if len(values) != 1 || values[1].Status != ua.StatusBad || pr.NotificationMessage.SequenceNumber != 2 {
		t.Fatalf("status change: %+v %v", pr.NotificationMessage, values)
	}
}

// A stuck client's answer is written outside the lock: value changes,
// new subscriptions and other sessions go on while it hangs.
func TestStuckSendBlocksNothing(t *testing.T) {
	f := newSubFixture(t)
	f.sent.gate, f.sent.entered = make(chan struct{}), make(chan struct{}, 100)
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(f.sent.gate) }) })
	sub := f.createSub(1, 100, 10, 1000)
	f.monitor(1, sub, nodeA)
	f.publish(1)
	go f.step(interval) // its answer gets stuck in send
	select {
	case <-f.sent.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the answer was not sent")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 1000 {
			f.nodes.set(nodeA, float64(i), ua.StatusOK, f.clock.Now())
			f.m.changed(nodeA)
		}
		other := f.createSub(2, 100, 10, 1000)
		f.monitor(2, other, nodeA)
		f.publish(2)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("value changes and another session's requests waited on a stuck send")
	}
	release.Do(func() { close(f.sent.gate) })
	f.settled()
}

func TestIDsUniqueAfterDeletes(t *testing.T) {
	f := newSubFixture(t)
	seenSub := map[uint32]bool{}
	seenItem := map[uint32]bool{}
	for round := range 5 {
		for session := uint32(1); session <= 3; session++ {
			sub := f.createSub(session, 100, 10, 1000)
			if seenSub[sub] {
				t.Fatalf("round %d: subscription id %d issued twice", round, sub)
			}
			seenSub[sub] = true
			items := f.monitor(session, sub, nodeA, nodeB)
			for _, id := range items {
				if seenItem[id] {
					t.Fatalf("round %d: item id %d issued twice", round, id)
				}
				seenItem[id] = true
			}
			del, err := f.m.deleteMonitoredItems(nil, &ua.DeleteMonitoredItemsRequest{RequestHeader: header(session), SubscriptionID: sub, MonitoredItemIDs: items[:1]}, 0)
			if err != nil || del.(*ua.DeleteMonitoredItemsResponse).Results[0] != ua.StatusOK {
				t.Fatalf("delete item: %v %+v", err, del)
			}
			if round%2 == 0 {
				if _, err := f.m.deleteSubscriptions(nil, &ua.DeleteSubscriptionsRequest{RequestHeader: header(session), SubscriptionIDs: []uint32{sub}}, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// Another session's subscription ids are as unknown as ids never issued.
func TestForeignSessionRefused(t *testing.T) {
	f := newSubFixture(t)
	sub := f.createSub(1, 100, 10, 1000)
	items := f.monitor(1, sub, nodeA)
	const other = 2
	tests := []struct {
		name string
		call func() (ua.Response, error)
		want ua.StatusCode // the service result or the one operation's result
	}{
		{"create monitored items", func() (ua.Response, error) {
			return f.m.createMonitoredItems(nil, &ua.CreateMonitoredItemsRequest{RequestHeader: header(other), SubscriptionID: sub,
				ItemsToCreate: []*ua.MonitoredItemCreateRequest{gopcua.NewMonitoredItemCreateRequestWithDefaults(nodeA, ua.AttributeIDValue, 1)}}, 0)
		}, ua.StatusBadSubscriptionIDInvalid},
		{"modify monitored items", func() (ua.Response, error) {
			return f.m.modifyMonitoredItems(nil, &ua.ModifyMonitoredItemsRequest{RequestHeader: header(other), SubscriptionID: sub,
				ItemsToModify: []*ua.MonitoredItemModifyRequest{{MonitoredItemID: items[0], RequestedParameters: &ua.MonitoringParameters{}}}}, 0)
		}, ua.StatusBadSubscriptionIDInvalid},
		{"set monitoring mode", func() (ua.Response, error) {
			return f.m.setMonitoringMode(nil, &ua.SetMonitoringModeRequest{RequestHeader: header(other), SubscriptionID: sub, MonitoredItemIDs: items}, 0)
		}, ua.StatusBadSubscriptionIDInvalid},
		{"delete monitored items", func() (ua.Response, error) {
			return f.m.deleteMonitoredItems(nil, &ua.DeleteMonitoredItemsRequest{RequestHeader: header(other), SubscriptionID: sub, MonitoredItemIDs: items}, 0)
		}, ua.StatusBadSubscriptionIDInvalid},
		{"modify subscription", func() (ua.Response, error) {
			return f.m.modifySubscription(nil, &ua.ModifySubscriptionRequest{RequestHeader: header(other), SubscriptionID: sub, RequestedPublishingInterval: 100}, 0)
		}, ua.StatusBadSubscriptionIDInvalid},
		{"republish", func() (ua.Response, error) {
			return f.m.republish(nil, &ua.RepublishRequest{RequestHeader: header(other), SubscriptionID: sub}, 0)
		}, ua.StatusBadSubscriptionIDInvalid},
		{"set publishing mode", func() (ua.Response, error) {
			return f.m.setPublishingMode(nil, &ua.SetPublishingModeRequest{RequestHeader: header(other), SubscriptionIDs: []uint32{sub}}, 0)
		}, ua.StatusBadSubscriptionIDInvalid},
		{"delete subscriptions", func() (ua.Response, error) {
			return f.m.deleteSubscriptions(nil, &ua.DeleteSubscriptionsRequest{RequestHeader: header(other), SubscriptionIDs: []uint32{sub}}, 0)
		}, ua.StatusBadSubscriptionIDInvalid},
		{"publish", func() (ua.Response, error) {
			return f.m.publish(nil, &ua.PublishRequest{RequestHeader: header(other)}, 99)
		}, ua.StatusBadNoSubscription},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := tt.call()
			got := ua.StatusOK
			var code ua.StatusCode
			switch r := resp.(type) {
			case nil:
				if errors.As(err, &code) {
					got = code
				}
			case *ua.ServiceFault:
				got = r.ResponseHeader.ServiceResult
			case *ua.SetPublishingModeResponse:
				got = r.Results[0]
			case *ua.DeleteSubscriptionsResponse:
				got = r.Results[0]
			}
			if got != tt.want {
				t.Fatalf("got %v (%v, %+v), want %v", got, err, resp, tt.want)
			}
		})
	}
	// The owner's subscription and item are untouched.
	id, _ := f.publish(1)
	f.step(interval)
	if _, values := dataOf(t, f.answer(id)); len(values) != 1 || values[1].Value.Value() != 1.0 {
		t.Fatalf("owner's initial value: %v", values)
	}
}

func TestPublishQueueBound(t *testing.T) {
	f := newSubFixture(t)
	f.createSub(1, 100, 1000, 3000)
	for i := range maxPublishRequests {
		if _, now := f.publish(1); now != nil {
			t.Fatalf("publish %d answered at once: %+v", i, now)
		}
	}
	if _, now := f.publish(1); faultOf(now) != ua.StatusBadTooManyPublishRequests {
		t.Fatalf("publish beyond the bound: %+v", now)
	}
	// Once one is answered, there is room for one more.
	f.step(interval)
	f.settled()
	if _, now := f.publish(1); now != nil {
		t.Fatalf("publish after an answer: %+v", now)
	}
	if _, now := f.publish(1); faultOf(now) != ua.StatusBadTooManyPublishRequests {
		t.Fatalf("publish beyond the bound again: %+v", now)
	}
}

func TestMonitoringModes(t *testing.T) {
	f := newSubFixture(t)
	sub := f.createSub(1, 100, 1000, 3000)
	create := func(mode ua.MonitoringMode) uint32 {
		req := gopcua.NewMonitoredItemCreateRequestWithDefaults(nodeA, ua.AttributeIDValue, uint32(mode)+1)
		req.MonitoringMode = mode
		resp, err := f.m.createMonitoredItems(nil, &ua.CreateMonitoredItemsRequest{RequestHeader: header(1), SubscriptionID: sub, ItemsToCreate: []*ua.MonitoredItemCreateRequest{req}}, 0)
		if err != nil || resp.(*ua.CreateMonitoredItemsResponse).Results[0].StatusCode != ua.StatusOK {
			t.Fatalf("create %v item: %v %+v", mode, err, resp)
		}
		return resp.(*ua.CreateMonitoredItemsResponse).Results[0].MonitoredItemID
	}
	setMode := func(mode ua.MonitoringMode, ids ...uint32) {
		resp, err := f.m.setMonitoringMode(nil, &ua.SetMonitoringModeRequest{RequestHeader: header(1), SubscriptionID: sub, MonitoringMode: mode, MonitoredItemIDs: ids}, 0)
		if err != nil || resp.(*ua.SetMonitoringModeResponse).Results[0] != ua.StatusOK {
			t.Fatalf("set %v: %v %+v", mode, err, resp)
		}
	}
	// Handles: Disabled 1, Sampling 2, Reporting 3.
	disabled, sampling, _ := create(ua.MonitoringModeDisabled), create(ua.MonitoringModeSampling), create(ua.MonitoringModeReporting)
	next := func(what string, want ...uint32) {
		t.Helper()
		id, _ := f.publish(1)
		f.step(interval)
		_, values := dataOf(t, f.answer(id))
		if len(values) != len(want) {
			t.Fatalf("%s: reported %v, want handles %v", what, values, want)
		}
		for _, h := range want {
			if values[h] == nil {
				t.Fatalf("%s: reported %v, want handles %v", what, values, want)
			}
		}
	}
	next("initial values", 3)
	f.nodes.set(nodeA, 5.0, ua.StatusOK, f.clock.Now())
	f.m.changed(nodeA)
	next("a change", 3)
	// Sampling kept the change; Reporting reports it. Enabling a
	// disabled item reports its current value.
	setMode(ua.MonitoringModeReporting, sampling, disabled)
	next("after enabling", 1, 2)
	// Disabled forgets what was not sent.
	f.nodes.set(nodeA, 6.0, ua.StatusOK, f.clock.Now())
	f.m.changed(nodeA)
	setMode(ua.MonitoringModeDisabled, disabled, sampling)
	next("after disabling two", 3)
}

func TestCreateMonitoredItemsValidation(t *testing.T) {
	f := newSubFixture(t)
	sub := f.createSub(1, 100, 10, 1000)
	item := func(mut func(*ua.MonitoredItemCreateRequest)) *ua.MonitoredItemCreateRequest {
		r := gopcua.NewMonitoredItemCreateRequestWithDefaults(nodeA, ua.AttributeIDValue, 1)
		mut(r)
		return r
	}
	deadband := ua.NewExtensionObject(&ua.DataChangeFilter{Trigger: ua.DataChangeTriggerStatusValue, DeadbandType: uint32(ua.DeadbandTypeAbsolute), DeadbandValue: 1})
	tests := []struct {
		name string
		item *ua.MonitoredItemCreateRequest
		want ua.StatusCode
	}{
		{"value of a site tag", item(func(*ua.MonitoredItemCreateRequest) {}), ua.StatusOK},
		{"ServiceLevel", item(func(r *ua.MonitoredItemCreateRequest) { r.ItemToMonitor.NodeID = serviceLevelID }), ua.StatusOK},
		{"trigger StatusValueTimestamp", item(func(r *ua.MonitoredItemCreateRequest) {
			r.RequestedParameters.Filter = ua.NewExtensionObject(&ua.DataChangeFilter{Trigger: ua.DataChangeTriggerStatusValueTimestamp})
		}), ua.StatusOK},
		{"nil item", nil, ua.StatusBadNodeIDInvalid},
		{"unknown node", item(func(r *ua.MonitoredItemCreateRequest) { r.ItemToMonitor.NodeID = ua.NewStringNodeID(1, "Nope.X") }), ua.StatusBadNodeIDUnknown},
		{"events of a variable", item(func(r *ua.MonitoredItemCreateRequest) { r.ItemToMonitor.AttributeID = ua.AttributeIDEventNotifier }), ua.StatusBadAttributeIDInvalid},
		{"another attribute", item(func(r *ua.MonitoredItemCreateRequest) { r.ItemToMonitor.AttributeID = ua.AttributeIDDisplayName }), ua.StatusBadAttributeIDInvalid},
		{"index range", item(func(r *ua.MonitoredItemCreateRequest) { r.ItemToMonitor.IndexRange = "1:2" }), ua.StatusBadIndexRangeInvalid},
		{"absolute deadband", item(func(r *ua.MonitoredItemCreateRequest) { r.RequestedParameters.Filter = deadband }), ua.StatusOK},
		{"percent deadband without an EURange", item(func(r *ua.MonitoredItemCreateRequest) {
			r.RequestedParameters.Filter = ua.NewExtensionObject(&ua.DataChangeFilter{Trigger: ua.DataChangeTriggerStatusValue, DeadbandType: uint32(ua.DeadbandTypePercent), DeadbandValue: 5})
		}), ua.StatusBadFilterNotAllowed}, // the CTT expects this (or BadMonitoredItemFilterUnsupported),
		{"negative deadband", item(func(r *ua.MonitoredItemCreateRequest) {
			r.RequestedParameters.Filter = ua.NewExtensionObject(&ua.DataChangeFilter{Trigger: ua.DataChangeTriggerStatusValue, DeadbandType: uint32(ua.DeadbandTypeAbsolute), DeadbandValue: -1})
		}), ua.StatusBadDeadbandFilterInvalid},
		{"bad trigger", item(func(r *ua.MonitoredItemCreateRequest) {
			r.RequestedParameters.Filter = ua.NewExtensionObject(&ua.DataChangeFilter{Trigger: 7})
		}), ua.StatusBadMonitoredItemFilterInvalid},
		{"bad mode", item(func(r *ua.MonitoredItemCreateRequest) { r.MonitoringMode = 9 }), ua.StatusBadMonitoringModeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := f.m.createMonitoredItems(nil, &ua.CreateMonitoredItemsRequest{RequestHeader: header(1), SubscriptionID: sub,
				TimestampsToReturn: ua.TimestampsToReturnBoth, ItemsToCreate: []*ua.MonitoredItemCreateRequest{tt.item}}, 0)
			if err != nil {
				t.Fatal(err)
			}
			res := resp.(*ua.CreateMonitoredItemsResponse).Results[0]
			if res.StatusCode != tt.want {
				t.Fatalf("got %v, want %v", res.StatusCode, tt.want)
			}
			if tt.want == ua.StatusOK && (res.MonitoredItemID == 0 || res.RevisedQueueSize != 1 || res.RevisedSamplingInterval != 100) {
				t.Fatalf("result %+v", res)
			}
		})
	}
	if _, err := f.m.createMonitoredItems(nil, &ua.CreateMonitoredItemsRequest{RequestHeader: header(1), SubscriptionID: sub,
		TimestampsToReturn: ua.TimestampsToReturnInvalid, ItemsToCreate: []*ua.MonitoredItemCreateRequest{item(func(*ua.MonitoredItemCreateRequest) {})}}, 0); !errors.Is(err, ua.StatusBadTimestampsToReturnInvalid) {
		t.Fatalf("invalid timestamps to return: %v", err)
	}
}

// Deleting a session's last subscription answers its waiting Publish
// requests BadNoSubscription; closing the session, BadSessionClosed.
func TestQueuedPublishAnsweredWhenNothingIsLeft(t *testing.T) {
	f := newSubFixture(t)
	sub := f.createSub(1, 100, 1000, 3000)
	id, _ := f.publish(1)
	if _, err := f.m.deleteSubscriptions(nil, &ua.DeleteSubscriptionsRequest{RequestHeader: header(1), SubscriptionIDs: []uint32{sub}}, 0); err != nil {
		t.Fatal(err)
	}
	if got := faultOf(f.answer(id)); got != ua.StatusBadNoSubscription {
		t.Fatalf("queued publish after the last delete: %v", got)
	}

	sub = f.createSub(1, 100, 1000, 3000)
	f.monitor(1, sub, nodeA)
	id, _ = f.publish(1)
	f.step(interval)
	f.answer(id)
	id, _ = f.publish(1)
	f.m.dropSession(tokenKey(ua.NewNumericNodeID(0, 1)))
	if got := faultOf(f.answer(id)); got != ua.StatusBadSessionClosed {
		t.Fatalf("queued publish of a closed session: %v", got)
	}
	f.settled()
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if len(f.m.subs) != 0 || len(f.m.items) != 0 || len(f.m.byNode) != 0 || len(f.m.sessions) != 0 {
		t.Fatalf("left after the session closed: %d subscriptions, %d items, %d nodes, %d sessions", len(f.m.subs), len(f.m.items), len(f.m.byNode), len(f.m.sessions))
	}
}

func TestMoreNotifications(t *testing.T) {
	f := newSubFixture(t)
	resp, err := f.m.createSubscription(nil, &ua.CreateSubscriptionRequest{RequestHeader: header(1), RequestedPublishingInterval: 100,
		RequestedMaxKeepAliveCount: 10, RequestedLifetimeCount: 1000, PublishingEnabled: true, MaxNotificationsPerPublish: 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	sub := resp.(*ua.CreateSubscriptionResponse).SubscriptionID
	f.monitor(1, sub, nodeA, nodeB, serviceLevelID, nodeA, nodeB)
	first, _ := f.publish(1)
	f.step(interval)
	var got []int
	more := []bool{}
	pr, values := dataOf(t, f.answer(first))
	got, more = append(got, len(values)), append(more, pr.MoreNotifications)
	// The rest is not held for the next interval: each Publish request
	// gets the next part at once.
	for range 2 {
		id, _ := f.publish(1)
		pr, values := dataOf(t, f.answer(id))
		got, more = append(got, len(values)), append(more, pr.MoreNotifications)
	}
	if fmt.Sprint(got, more) != "[2 2 1] [true true false]" {
		t.Fatalf("parts %v, more %v", got, more)
	}
}

func TestStamped(t *testing.T) {
	src, srv := time.Unix(100, 0), time.Unix(200, 0)
	dv := &ua.DataValue{EncodingMask: ua.DataValueValue | ua.DataValueSourceTimestamp | ua.DataValueServerTimestamp, Value: ua.MustVariant(1.0), SourceTimestamp: src, ServerTimestamp: srv}
	for _, tt := range []struct {
		ts                 ua.TimestampsToReturn
		wantSrc, wantSrv   time.Time
		wantSrcB, wantSrvB bool
	}{
		{ua.TimestampsToReturnBoth, src, srv, true, true},
		{ua.TimestampsToReturnSource, src, time.Time{}, true, false},
		{ua.TimestampsToReturnServer, time.Time{}, srv, false, true},
		{ua.TimestampsToReturnNeither, time.Time{}, time.Time{}, false, false},
	} {
		got := stamped(dv, tt.ts)
		if !got.SourceTimestamp.Equal(tt.wantSrc) || !got.ServerTimestamp.Equal(tt.wantSrv) ||
			(got.EncodingMask&ua.DataValueSourceTimestamp != 0) != tt.wantSrcB || (got.EncodingMask&ua.DataValueServerTimestamp != 0) != tt.wantSrvB {
			t.Errorf("%v: %+v", tt.ts, got)
		}
	}
	if dv.EncodingMask&ua.DataValueServerTimestamp == 0 {
		t.Fatal("stamped changed the stored value")
	}
}

func TestRevise(t *testing.T) {
	f := newSubFixture(t)
	for _, tt := range []struct {
		intervalMS          float64
		keepAlive, lifetime uint32
		want                string
	}{
		{0, 0, 0, "50ms 10 30"},
		{math.NaN(), 1, 1, "50ms 1 3"},
		{250, 5000, 10, "250ms 1000 3000"},
		{1e9, 2, 1e9, "1m0s 2 60"},
		{100, 10, 1 << 31, "100ms 10 36000"},
	} {
		iv, ka, lt := f.m.revise(tt.intervalMS, tt.keepAlive, tt.lifetime)
		if got := fmt.Sprint(iv, ka, lt); got != tt.want {
			t.Errorf("revise(%v, %d, %d) = %s, want %s", tt.intervalMS, tt.keepAlive, tt.lifetime, got, tt.want)
		}
	}
}

// --- real clients, real server ---

func (ts *testServer) held() (subs, items float64) {
	var a, b dto.Metric
	_ = ts.metrics.subscriptions.Write(&a)
	_ = ts.metrics.monitoredItems.Write(&b)
	return a.GetGauge().GetValue(), b.GetGauge().GetValue()
}

// CloseSession takes the session's subscriptions and items with it.
func TestSessionCloseDeletesSubscriptions(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	c := connect(t, ts.Endpoint())
	subscribe(t, c, serviceLevelID)
	subscribe(t, c, ts.NodeID("Pump1", "Speed"))
	if subs, items := ts.held(); subs != 2 || items != 2 {
		t.Fatalf("holding %v subscriptions and %v items, want 2 and 2", subs, items)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.CloseSession(ctx); err != nil {
		t.Fatalf("close session: %v", err)
	}
	testwait.For(t, 5*time.Second, "the closed session's subscriptions to go", func() bool {
		subs, items := ts.held()
		return subs == 0 && items == 0
	})
}

// Clients that vanish without deleting their subscriptions leave nothing
// behind once the subscriptions' lifetime has passed.
func TestVanishedClientsLeaveNothing(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	const clients = 3
	for range clients {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := dialQuiet(ctx, ts.Endpoint())
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		sub, err := send[*ua.CreateSubscriptionResponse](ctx, c, &ua.CreateSubscriptionRequest{
			RequestedPublishingInterval: 50, RequestedMaxKeepAliveCount: 1, RequestedLifetimeCount: 3, PublishingEnabled: true,
		})
		if err == nil {
			_, err = send[*ua.CreateMonitoredItemsResponse](ctx, c, &ua.CreateMonitoredItemsRequest{
				SubscriptionID: sub.SubscriptionID, TimestampsToReturn: ua.TimestampsToReturnBoth, ItemsToCreate: itemRequests(4, ts.NodeID("Pump1", "Speed")),
			})
		}
		vanish(c)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, 10*time.Second, "the vanished clients' subscriptions to expire", func() bool {
		subs, items := ts.held()
		return subs == 0 && items == 0 && metricValue(t, ts.metrics.subsExpired) == clients
	})
	stillServing(t, ts)
}

// Close publishes ServiceLevel 0 to subscribers within the grace, and
// leaves no subscription goroutine behind.
func TestCloseEndsSubscriptions(t *testing.T) {
	ts := startServer(t, activeState(), func(c *Config) { c.ShutdownGrace = 300 * time.Millisecond })
	c := connect(t, ts.Endpoint(), gopcua.RequestTimeout(500*time.Millisecond))
	notes, first := subscribe(t, c, serviceLevelID)
	if got := levelOf(t, first); got != LevelActive {
		t.Fatalf("initial ServiceLevel %d", got)
	}
	closed := make(chan error, 1)
	go func() { closed <- ts.Close() }()
	if got := nextByte(t, notes); got != LevelDown {
		t.Fatalf("ServiceLevel on close %d, want 0", got)
	}
	// A client that sees 0 leaves; the library's Close then returns.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx)
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return")
	}
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	if strings.Contains(b.String(), "opcua.(*subscriptions)") {
		t.Fatalf("subscription goroutines left after Close:\n%s", b.String())
	}
}

// An absolute deadband holds back numeric changes no larger than it, from
// the last value reported; status changes always pass; other types have no
// deadband.
func TestDeadbandTriggers(t *testing.T) {
	f := changeFilter{trigger: ua.DataChangeTriggerStatusValue, deadband: 1}
	val := func(v any, st ua.StatusCode) *ua.DataValue {
		return &ua.DataValue{Value: ua.MustVariant(v), Status: st}
	}
	for _, tt := range []struct {
		name       string
		last, next *ua.DataValue
		want       bool
	}{
		{"within", val(10.0, ua.StatusOK), val(10.9, ua.StatusOK), false},
		{"at the deadband", val(10.0, ua.StatusOK), val(11.0, ua.StatusOK), false},
		{"beyond", val(10.0, ua.StatusOK), val(11.1, ua.StatusOK), true},
		{"beyond, downwards", val(10.0, ua.StatusOK), val(8.5, ua.StatusOK), true},
		{"integers within", val(int32(5), ua.StatusOK), val(int32(6), ua.StatusOK), false},
		{"status change within", val(10.0, ua.StatusOK), val(10.1, ua.StatusUncertain), true},
		{"strings", val("a", ua.StatusOK), val("b", ua.StatusOK), true},
		{"first value", nil, val(1.0, ua.StatusOK), true},
	} {
		if got := triggers(f, tt.last, tt.next); got != tt.want {
			t.Errorf("%s: triggers = %v, want %v", tt.name, got, tt.want)
		}
	}
	if !triggers(changeFilter{trigger: ua.DataChangeTriggerStatusValue}, val(10.0, ua.StatusOK), val(10.1, ua.StatusOK)) {
		t.Error("without a deadband a change of 0.1 was held back")
	}
	// Trigger Status (Part 4, 7.22.2): only a change of the StatusCode.
	status := changeFilter{trigger: ua.DataChangeTriggerStatus}
	if triggers(status, val(10.0, ua.StatusOK), val(99.0, ua.StatusOK)) {
		t.Error("trigger Status reported a value change with the same StatusCode")
	}
	if !triggers(status, val(10.0, ua.StatusOK), val(10.0, ua.StatusUncertainLastUsableValue)) {
		t.Error("trigger Status held back a StatusCode change")
	}
}
