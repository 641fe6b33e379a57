package integration

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

func eventField(typ uint32, names ...string) *ua.SimpleAttributeOperand {
	path := make([]*ua.QualifiedName, len(names))
	for i, n := range names {
		path[i] = &ua.QualifiedName{Name: n}
	}
	return &ua.SimpleAttributeOperand{TypeDefinitionID: ua.NewNumericNodeID(0, typ), BrowsePath: path, AttributeID: ua.AttributeIDValue}
}

// The select clause of the alarm tests, and the index of each field.
var uaAlarmSelect = []*ua.SimpleAttributeOperand{
	eventField(id.BaseEventType, "EventId"), eventField(id.BaseEventType, "EventType"),
	eventField(id.BaseEventType, "SourceName"), eventField(id.BaseEventType, "Message"),
	eventField(id.BaseEventType, "Severity"), eventField(id.ConditionType, "ConditionName"),
	eventField(id.AlarmConditionType, "ActiveState", "Id"), eventField(id.AcknowledgeableConditionType, "AckedState", "Id"),
	{TypeDefinitionID: ua.NewNumericNodeID(0, id.ConditionType), AttributeID: ua.AttributeIDNodeID},
}

const (
	evID = iota
	evType
	evSource
	evMessage
	evSeverity
	evCondition
	evActive
	evAcked
	evConditionID
)

// uaEvent is one event a client received, and when.
type uaEvent struct {
	fields []*ua.Variant
	at     time.Time
}

func (e uaEvent) text(i int) string {
	switch v := e.fields[i].Value().(type) {
	case string:
		return v
	case *ua.LocalizedText:
		return v.Text
	case []byte:
		return string(v)
	}
	return fmt.Sprint(e.fields[i].Value())
}

// uaEvents subscribes c to the events of the Server object with the
// alarm select clause. A data item on ServiceLevel in the same
// subscription shows the client's publish loop runs (gopcua's client can
// leave it paused; opcua/WORKAROUNDS.md): the subscription is made again
// otherwise.
func uaEvents(t *testing.T, c *gopcua.Client) (uint32, <-chan uaEvent) {
	t.Helper()
	for try := 1; ; try++ {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		raw := make(chan *gopcua.PublishNotificationData, 1024)
		sub, err := c.Subscribe(ctx, &gopcua.SubscriptionParameters{Interval: 50 * time.Millisecond}, raw)
		if err != nil {
			t.Fatalf("subscribe: %v", err)
		}
		ev := gopcua.NewMonitoredItemCreateRequestWithDefaults(ua.NewNumericNodeID(0, id.Server), ua.AttributeIDEventNotifier, 2)
		// An empty where clause: gopcua's encoder writes nothing for a
		// nil one, and the request cannot be decoded then.
		ev.RequestedParameters.Filter = ua.NewExtensionObject(&ua.EventFilter{SelectClauses: uaAlarmSelect, WhereClause: &ua.ContentFilter{}})
		res, err := sub.Monitor(ctx, ua.TimestampsToReturnBoth,
			gopcua.NewMonitoredItemCreateRequestWithDefaults(ua.NewNumericNodeID(0, id.Server_ServiceLevel), ua.AttributeIDValue, 1), ev)
		if err != nil || res.Results[1].StatusCode != ua.StatusOK {
			t.Fatalf("monitor the Server's events: %v %+v", err, res)
		}
		out := make(chan uaEvent, 20000)
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
							out <- uaEvent{fields: e.EventFields, at: now}
						}
					}
				}
			}
		}()
		select {
		case <-alive:
			return sub.SubscriptionID, out
		case <-time.After(5 * time.Second):
			cancel()
			if try == 3 {
				t.Fatal("the event subscription never published")
			}
		}
	}
}

// nextEvent waits for the next event that match accepts.
func nextEvent(t *testing.T, ch <-chan uaEvent, what string, match func(uaEvent) bool) uaEvent {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case e := <-ch:
			if match(e) {
				return e
			}
		case <-deadline:
			t.Fatalf("no event: %s", what)
		}
	}
}

func uaCall(t *testing.T, c *gopcua.Client, obj, method *ua.NodeID, args ...any) ua.StatusCode {
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
	return res.StatusCode
}

// TestOPCUAAlarmsAndConditions: gopcua clients subscribed to the Server
// object's events on both voters receive a gateway alarm the simulator
// raises; an acknowledgement through the Call service is refused on the
// Standby (BadInvalidState, counted, the gateway hears nothing) and
// reaches the simulator with the Active's epoch; both clients see the
// condition acknowledged; a stale EventId is refused; ConditionRefresh
// replays every retained condition.
func TestOPCUAAlarmsAndConditions(t *testing.T) {
	sim, c, active, standby := opcuaPair(t)
	site := testcluster.SiteConfigGateway("ua-alarms", sim.Addr, nil, 0)
	site = append(site, `alarms:
  sources:
    - {connection: gw, source: Pump1}
`...)
	deploySite(t, c, site)
	// The first alarm tells the alarm worker subscribed.
	simAlarm(t, sim, "raise", url.Values{"id": {"W0"}, "source": {"Pump1"}, "severity": {"100"}, "condition": {"Warm"}, "message": {"warm-up"}})
	testwait.For(t, 30*time.Second, "the first alarm in the replicated state", func() bool { return listAlarms(t, c, active)["W0"].Active })

	waitRedundancyLevels(t, active, standby, "")
	onActive, onStandby := uaClient(t, active.OPCUA), uaClient(t, standby.OPCUA)
	_, activeEvents := uaEvents(t, onActive)
	standbySub, standbyEvents := uaEvents(t, onStandby)

	var latencies []time.Duration
	for i := 1; i <= 5; i++ {
		alarm := fmt.Sprintf("A%d", i)
		raised := time.Now()
		simAlarm(t, sim, "raise", url.Values{"id": {alarm}, "source": {"Pump1"}, "severity": {"800"}, "condition": {"HiLevel"}, "message": {"level high " + alarm}})
		e := nextEvent(t, activeEvents, alarm+" raised, at the Active's client", func(e uaEvent) bool { return e.text(evMessage) == "level high "+alarm })
		latencies = append(latencies, e.at.Sub(raised))
		if e.text(evSource) != "Pump1" || e.text(evCondition) != "HiLevel" || e.fields[evSeverity].Value() != uint16(800) ||
			e.fields[evActive].Value() != true || e.fields[evAcked].Value() != false ||
			e.fields[evType].Value().(*ua.NodeID).IntID() != id.OffNormalAlarmType {
			t.Fatalf("event of %s: %v", alarm, e.fields)
		}
		s := nextEvent(t, standbyEvents, alarm+" raised, at the Standby's client", func(e uaEvent) bool { return e.text(evMessage) == "level high "+alarm })
		if s.text(evID) != e.text(evID) {
			t.Fatalf("EventId %q on the Standby, %q on the Active: every voter names the transition alike", s.text(evID), e.text(evID))
		}
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	t.Logf("simulator raise -> event at the Active's client: %v (sorted)", latencies)
	if latencies[len(latencies)/2] > 2*time.Second {
		t.Fatalf("median raise -> event %v: the event path is stalled", latencies[len(latencies)/2])
	}

	// Acknowledge A1 with its last EventId, read from its condition node
	// on the Standby (the same as the Active's).
	cond := siteNode(t, onStandby, "alarm:A1")
	dv, err := readValue(onStandby, ua.NewStringNodeID(cond.Namespace(), "alarm:A1|EventId"))
	if err != nil || dv.Status != ua.StatusOK {
		t.Fatalf("read A1's EventId: %v %v", err, dv)
	}
	eventID := dv.Value.Value().([]byte)
	comment := &ua.LocalizedText{Text: "seen from the HMI", EncodingMask: ua.LocalizedTextText}
	ackMethod := ua.NewNumericNodeID(0, id.AcknowledgeableConditionType_Acknowledge)

	denied := metricLine(standby, `scadad_gate_denied_total{reason="secondary",surface="ack"}`)
	if got := uaCall(t, onStandby, cond, ackMethod, eventID, comment); got != ua.StatusBadInvalidState {
		t.Fatalf("Acknowledge on the Standby: %v, want BadInvalidState", got)
	}
	if acks := simAlarmAcks(t, sim).Alarms.Acks; len(acks) != 0 {
		t.Fatalf("the Standby's acknowledgement reached the gateway: %+v", acks)
	}
	if after := metricLine(standby, `scadad_gate_denied_total{reason="secondary",surface="ack"}`); after == denied || after == "" {
		t.Fatalf("the Standby's refusal was not counted: %q before, %q after", denied, after)
	}
	stale := append([]byte(nil), eventID...)
	stale[len(stale)-1]++
	if got := uaCall(t, onActive, cond, ackMethod, stale, comment); got != ua.StatusBadEventIDUnknown {
		t.Fatalf("Acknowledge with a stale EventId: %v, want BadEventIdUnknown", got)
	}
	if got := uaCall(t, onActive, cond, ackMethod, eventID, comment); got != ua.StatusOK {
		t.Fatalf("Acknowledge on the Active: %v", got)
	}
	acks := simAlarmAcks(t, sim).Alarms.Acks
	if len(acks) != 1 || acks[0].AlarmID != "A1" || acks[0].Operator != "anonymous" || acks[0].Epoch == "" {
		t.Fatalf("gateway acknowledgements %+v, want A1 by the session's identity with the Active's epoch", acks)
	}
	var a1 uaEvent
	for name, ch := range map[string]<-chan uaEvent{"Active": activeEvents, "Standby": standbyEvents} {
		a1 = nextEvent(t, ch, "A1 acknowledged, at the "+name+"'s client", func(e uaEvent) bool {
			return e.text(evMessage) == "level high A1" && e.fields[evAcked].Value() == true
		})
	}
	if a1.fields[evActive].Value() != true {
		t.Fatalf("A1 after the acknowledgement: %v", a1.fields)
	}

	// ConditionRefresh on the Standby replays every retained condition:
	// W0 and A1..A5 (A1 is acknowledged but still active).
	if got := uaCall(t, onStandby, ua.NewNumericNodeID(0, id.ConditionType), ua.NewNumericNodeID(0, id.ConditionType_ConditionRefresh), standbySub); got != ua.StatusOK {
		t.Fatalf("ConditionRefresh: %v", got)
	}
	nextEvent(t, standbyEvents, "RefreshStartEvent", func(e uaEvent) bool {
		return e.fields[evType].Value().(*ua.NodeID).IntID() == id.RefreshStartEventType
	})
	var replayed []string
	for {
		e := nextEvent(t, standbyEvents, "the refresh's events", func(uaEvent) bool { return true })
		if e.fields[evType].Value().(*ua.NodeID).IntID() == id.RefreshEndEventType {
			break
		}
		replayed = append(replayed, e.text(evCondition)+":"+e.text(evMessage))
	}
	sort.Strings(replayed)
	want := []string{"HiLevel:level high A1", "HiLevel:level high A2", "HiLevel:level high A3", "HiLevel:level high A4", "HiLevel:level high A5", "Warm:warm-up"}
	if fmt.Sprint(replayed) != fmt.Sprint(want) {
		t.Fatalf("ConditionRefresh replayed %q, want %q", replayed, want)
	}
}
