// Package uaevents is the tests' OPC UA alarm client: it subscribes a
// gopcua client to an event notifier with an EventFilter and hands each
// event's fields, with when it arrived, to the test, and calls methods
// (ConditionRefresh, Acknowledge…). Tests of package
// opcua and the integration tests use it. It must not be imported by
// production code.
package uaevents

import (
	"context"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

// Field is a select clause (or where-clause operand) naming the field
// path of event type typ.
func Field(typ uint32, names ...string) *ua.SimpleAttributeOperand {
	path := make([]*ua.QualifiedName, len(names))
	for i, n := range names {
		path[i] = &ua.QualifiedName{Name: n}
	}
	return &ua.SimpleAttributeOperand{TypeDefinitionID: ua.NewNumericNodeID(0, typ), BrowsePath: path, AttributeID: ua.AttributeIDValue}
}

// ConditionID is the select clause of the ConditionId (the NodeId
// attribute of ConditionType).
func ConditionID() *ua.SimpleAttributeOperand {
	return &ua.SimpleAttributeOperand{TypeDefinitionID: ua.NewNumericNodeID(0, id.ConditionType), AttributeID: ua.AttributeIDNodeID}
}

// WithWhere is f with an empty where clause if it has none: gopcua's
// encoder writes nothing for a nil one, and no decoder (gopcua's own
// server's included) can read the request then.
func WithWhere(f *ua.EventFilter) *ua.EventFilter {
	if f.WhereClause != nil {
		return f
	}
	g := *f
	g.WhereClause = &ua.ContentFilter{}
	return &g
}

// Event is one event a subscription delivered: its fields in the order
// of the select clauses, and when the client had it.
type Event struct {
	Fields []*ua.Variant
	At     time.Time
}

// Sub is a subscription with one event item.
type Sub struct {
	*gopcua.Subscription
	// ItemID and Result are the event item's.
	ItemID uint32
	Result *ua.MonitoredItemCreateResult
	// Events has every event the item delivered, in order (buffered for
	// 20,000).
	Events <-chan Event
}

// eventHandle is the event item's client handle; the data item on
// ServiceLevel has another.
const eventHandle = 2

// Subscribe subscribes c to the events of notifier with filter (50 ms
// publishing interval). A data item on ServiceLevel in the same
// subscription shows the client's publish loop runs: gopcua's client can
// leave it paused (opcua/WORKAROUNDS.md), and the subscription is then
// made again, up to three times.
func Subscribe(t testing.TB, c *gopcua.Client, notifier *ua.NodeID, filter *ua.EventFilter) *Sub {
	t.Helper()
	for try := 1; ; try++ {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		raw := make(chan *gopcua.PublishNotificationData, 1024)
		sub, err := c.Subscribe(ctx, &gopcua.SubscriptionParameters{Interval: 50 * time.Millisecond}, raw)
		if err != nil {
			t.Fatalf("subscribe: %v", err)
		}
		ev := gopcua.NewMonitoredItemCreateRequestWithDefaults(notifier, ua.AttributeIDEventNotifier, eventHandle)
		ev.RequestedParameters.Filter = ua.NewExtensionObject(WithWhere(filter))
		ev.RequestedParameters.QueueSize = 0
		res, err := sub.Monitor(ctx, ua.TimestampsToReturnBoth,
			gopcua.NewMonitoredItemCreateRequestWithDefaults(ua.NewNumericNodeID(0, id.Server_ServiceLevel), ua.AttributeIDValue, 1), ev)
		if err != nil || len(res.Results) != 2 {
			t.Fatalf("monitor the events of %s: %v %+v", notifier, err, res)
		}
		events := make(chan Event, 20000)
		alive := make(chan struct{}, 1)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case n := <-raw:
					now := time.Now()
					switch v := n.Value.(type) {
					case *ua.DataChangeNotification:
						select {
						case alive <- struct{}{}:
						default:
						}
					case *ua.EventNotificationList:
						for _, e := range v.Events {
							if e.ClientHandle == eventHandle {
								events <- Event{Fields: e.EventFields, At: now}
							}
						}
					}
				}
			}
		}()
		select {
		case <-alive:
			return &Sub{Subscription: sub, ItemID: res.Results[1].MonitoredItemID, Result: res.Results[1], Events: events}
		case <-time.After(5 * time.Second):
			cancel()
			if try == 3 {
				t.Fatalf("the subscription to the events of %s never published", notifier)
			}
		}
	}
}

// Next waits up to d for the next event match accepts (nil: any),
// skipping the others.
func (s *Sub) Next(t testing.TB, d time.Duration, what string, match func(Event) bool) Event {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case e := <-s.Events:
			if match == nil || match(e) {
				return e
			}
		case <-deadline:
			t.Fatalf("no event within %v: %s", d, what)
			return Event{}
		}
	}
}

// None checks that no event arrives within d.
func (s *Sub) None(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case e := <-s.Events:
		t.Fatalf("unexpected event %v", e.Fields)
	case <-time.After(d):
	}
}

// Call calls method on obj with args (each made a Variant) and returns
// its result; a failed request fails the test.
func Call(t testing.TB, c *gopcua.Client, obj, method *ua.NodeID, args ...any) *ua.CallMethodResult {
	t.Helper()
	in := make([]*ua.Variant, len(args))
	for i, a := range args {
		in[i] = ua.MustVariant(a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.Call(ctx, &ua.CallMethodRequest{ObjectID: obj, MethodID: method, InputArguments: in})
	if err != nil {
		t.Fatalf("call %v on %v: %v", method, obj, err)
	}
	return res
}
