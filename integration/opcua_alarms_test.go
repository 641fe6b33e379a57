package integration

import (
	"fmt"
	"net/url"
	"sort"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/internal/uaevents"
)

// The select clause of the alarm tests, and the index of each field.
var uaAlarmSelect = []*ua.SimpleAttributeOperand{
	uaevents.Field(id.BaseEventType, "EventId"), uaevents.Field(id.BaseEventType, "EventType"),
	uaevents.Field(id.BaseEventType, "SourceName"), uaevents.Field(id.BaseEventType, "Message"),
	uaevents.Field(id.BaseEventType, "Severity"), uaevents.Field(id.ConditionType, "ConditionName"),
	uaevents.Field(id.AlarmConditionType, "ActiveState", "Id"), uaevents.Field(id.AcknowledgeableConditionType, "AckedState", "Id"),
	uaevents.ConditionID(),
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

// eventText is field i of e as text.
func eventText(e uaevents.Event, i int) string {
	switch v := e.Fields[i].Value().(type) {
	case string:
		return v
	case *ua.LocalizedText:
		return v.Text
	case []byte:
		return string(v)
	}
	return fmt.Sprint(e.Fields[i].Value())
}

// uaEvents subscribes c to the events of the Server object with the
// alarm select clause.
func uaEvents(t *testing.T, c *gopcua.Client) *uaevents.Sub {
	t.Helper()
	return uaevents.Subscribe(t, c, ua.NewNumericNodeID(0, id.Server), &ua.EventFilter{SelectClauses: uaAlarmSelect})
}

// eventWait bounds the wait for an event in the integration tests.
const eventWait = 30 * time.Second

func uaCall(t *testing.T, c *gopcua.Client, obj, method *ua.NodeID, args ...any) ua.StatusCode {
	t.Helper()
	return uaevents.Call(t, c, obj, method, args...).StatusCode
}

// TestOPCUAAlarmsAndConditions: gopcua clients subscribed to the Server
// object's events on both voters receive a gateway alarm the simulator
// raises; an acknowledgement through the Call service is refused on the
// Standby (BadInvalidState, counted, the gateway hears nothing) and
// reaches the simulator with the Active's epoch; both clients see the
// condition acknowledged; a stale EventId is refused; ConditionRefresh
// replays every retained condition.
func TestOPCUAAlarmsAndConditions(t *testing.T) {
	sim, _, active, standby := alarmPair(t)
	onActive, onStandby := uaClient(t, active.OPCUA), uaClient(t, standby.OPCUA)
	activeEvents := uaEvents(t, onActive)
	standbyEvents := uaEvents(t, onStandby)

	var latencies []time.Duration
	for i := 1; i <= 5; i++ {
		alarm := fmt.Sprintf("A%d", i)
		raised := time.Now()
		simAlarm(t, sim, "raise", url.Values{"id": {alarm}, "source": {"Pump1"}, "severity": {"800"}, "condition": {"HiLevel"}, "message": {"level high " + alarm}})
		e := activeEvents.Next(t, eventWait, alarm+" raised, at the Active's client", func(e uaevents.Event) bool { return eventText(e, evMessage) == "level high "+alarm })
		latencies = append(latencies, e.At.Sub(raised))
		if eventText(e, evSource) != "Pump1" || eventText(e, evCondition) != "HiLevel" || e.Fields[evSeverity].Value() != uint16(800) ||
			e.Fields[evActive].Value() != true || e.Fields[evAcked].Value() != false ||
			e.Fields[evType].Value().(*ua.NodeID).IntID() != id.OffNormalAlarmType {
			t.Fatalf("event of %s: %v", alarm, e.Fields)
		}
		s := standbyEvents.Next(t, eventWait, alarm+" raised, at the Standby's client", func(e uaevents.Event) bool { return eventText(e, evMessage) == "level high "+alarm })
		if eventText(s, evID) != eventText(e, evID) {
			t.Fatalf("EventId %q on the Standby, %q on the Active: every voter names the transition alike", eventText(s, evID), eventText(e, evID))
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
	var a1 uaevents.Event
	for name, ch := range map[string]*uaevents.Sub{"Active": activeEvents, "Standby": standbyEvents} {
		a1 = ch.Next(t, eventWait, "A1 acknowledged, at the "+name+"'s client", func(e uaevents.Event) bool {
			return eventText(e, evMessage) == "level high A1" && e.Fields[evAcked].Value() == true
		})
	}
	if a1.Fields[evActive].Value() != true {
		t.Fatalf("A1 after the acknowledgement: %v", a1.Fields)
	}

	// ConditionRefresh on the Standby replays every retained condition:
	// W0 and A1..A5 (A1 is acknowledged but still active).
	if got := uaCall(t, onStandby, ua.NewNumericNodeID(0, id.ConditionType), ua.NewNumericNodeID(0, id.ConditionType_ConditionRefresh), standbyEvents.SubscriptionID); got != ua.StatusOK {
		t.Fatalf("ConditionRefresh: %v", got)
	}
	standbyEvents.Next(t, eventWait, "RefreshStartEvent", func(e uaevents.Event) bool {
		return e.Fields[evType].Value().(*ua.NodeID).IntID() == id.RefreshStartEventType
	})
	var replayed []string
	for {
		e := standbyEvents.Next(t, eventWait, "the refresh's events", nil)
		if e.Fields[evType].Value().(*ua.NodeID).IntID() == id.RefreshEndEventType {
			break
		}
		replayed = append(replayed, eventText(e, evCondition)+":"+eventText(e, evMessage))
	}
	sort.Strings(replayed)
	want := []string{"HiLevel:level high A1", "HiLevel:level high A2", "HiLevel:level high A3", "HiLevel:level high A4", "HiLevel:level high A5", "Warm:warm-up"}
	if fmt.Sprint(replayed) != fmt.Sprint(want) {
		t.Fatalf("ConditionRefresh replayed %q, want %q", replayed, want)
	}
}
