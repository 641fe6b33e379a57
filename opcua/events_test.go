package opcua

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/internal/uaevents"
)

// fakeAlarms records the alarm methods that reach the alarm service.
type fakeAlarms struct {
	mu    sync.Mutex
	calls []string
	err   error
}

func (f *fakeAlarms) record(op, alarm, operator, comment string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("%s %s by %s: %s", op, alarm, operator, comment))
	return f.err
}

func (f *fakeAlarms) Acknowledge(_ context.Context, alarm, operator, comment string) error {
	return f.record("ack", alarm, operator, comment)
}
func (f *fakeAlarms) Confirm(_ context.Context, alarm, operator, comment string) error {
	return f.record("confirm", alarm, operator, comment)
}
func (f *fakeAlarms) Comment(_ context.Context, alarm, operator, comment string) error {
	return f.record("comment", alarm, operator, comment)
}

func (f *fakeAlarms) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// notActive is what the alarm service answers on a Standby.
type notActive struct{}

func (notActive) Error() string {
	return "acknowledge refused: this node is not the Active (secondary)"
}
func (notActive) GateReason() string { return "secondary" }

// alarmSelect is the select clause the tests use; eventField indexes it.
var alarmSelect = []*ua.SimpleAttributeOperand{
	uaevents.Field(id.BaseEventType, "EventId"), uaevents.Field(id.BaseEventType, "EventType"), uaevents.Field(id.BaseEventType, "SourceName"), uaevents.Field(id.BaseEventType, "Message"), uaevents.Field(id.BaseEventType, "Severity"),
	uaevents.Field(id.ConditionType, "ConditionName"), uaevents.Field(id.ConditionType, "Retain"),
	uaevents.Field(id.AlarmConditionType, "ActiveState", "Id"), uaevents.Field(id.AcknowledgeableConditionType, "AckedState", "Id"),
	uaevents.ConditionID(),
	uaevents.Field(id.ConditionType, "Comment"), uaevents.Field(id.BaseEventType, "Time"),
}

const (
	fEventID = iota
	fEventType
	fSourceName
	fMessage
	fSeverity
	fConditionName
	fRetain
	fActive
	fAcked
	fConditionID
	fComment
	fTime
)

// next is the next event of es (any), its fields.
func next(t testing.TB, es *uaevents.Sub) []*ua.Variant {
	t.Helper()
	return es.Next(t, notifyDeadline, "an event", nil).Fields
}

func pumpAlarm(seq uint64, active, acked bool) Condition {
	return Condition{ID: "P1-HI", Source: "Pump1", Name: "SpeedHigh", Message: "Pump1 speed high", Severity: 700, Limit: true, State: "Hi",
		Active: active, Acked: acked, Time: time.Unix(1700000000, 0).UTC(), Seq: seq}
}

func TestEventsOnServerAndInstanceNotifiers(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	c := connect(t, ts.Endpoint())
	all := uaevents.Subscribe(t, c, ua.NewNumericNodeID(0, id.Server), &ua.EventFilter{SelectClauses: alarmSelect})
	if all.Result.StatusCode != ua.StatusOK || all.Result.RevisedQueueSize != defaultEventQueue {
		t.Fatalf("event item on Server: %+v", all.Result)
	}
	tank := uaevents.Subscribe(t, c, ts.ns.folderID("Tank1"), &ua.EventFilter{SelectClauses: alarmSelect})

	ts.ConditionChanged(pumpAlarm(1, true, false))
	e := next(t, all)
	if got := string(e[fEventID].Value().([]byte)); got != "P1-HI\x001" {
		t.Fatalf("EventId %q", got)
	}
	if got := e[fEventType].Value().(*ua.NodeID); got.IntID() != id.ExclusiveLimitAlarmType {
		t.Fatalf("EventType %v", got)
	}
	if e[fSourceName].Value() != "Pump1" || e[fMessage].Value().(*ua.LocalizedText).Text != "Pump1 speed high" ||
		e[fSeverity].Value() != uint16(700) || e[fConditionName].Value() != "SpeedHigh" || e[fRetain].Value() != true ||
		e[fActive].Value() != true || e[fAcked].Value() != false {
		t.Fatalf("event fields %v", e)
	}
	if got := e[fConditionID].Value().(*ua.NodeID); got.String() != ts.ns.conditionID("P1-HI").String() {
		t.Fatalf("ConditionId %v", got)
	}
	if got := e[fTime].Value().(time.Time); !got.Equal(time.Unix(1700000000, 0)) {
		t.Fatalf("Time %v", got)
	}
	// Tank1's notifier reports Tank1's conditions only.
	tank.None(t, 300*time.Millisecond)
	ts.ConditionChanged(Condition{ID: "T1-LO", Source: "Tank1", Name: "LevelLow", Message: "low", Severity: 300, Active: true, Seq: 1})
	if got := next(t, tank); got[fSourceName].Value() != "Tank1" {
		t.Fatalf("Tank1 event from %v", got[fSourceName].Value())
	}
	if got := next(t, all); got[fSourceName].Value() != "Tank1" {
		t.Fatalf("Server event from %v", got[fSourceName].Value())
	}
}

func TestEventWhereClause(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	c := connect(t, ts.Endpoint())
	literal := func(v any) *ua.ExtensionObject {
		return ua.NewExtensionObject(&ua.LiteralOperand{Value: ua.MustVariant(v)})
	}
	// OfType(OffNormalAlarmType) And Severity >= 500.
	where := &ua.ContentFilter{Elements: []*ua.ContentFilterElement{
		{FilterOperator: ua.FilterOperatorAnd, FilterOperands: []*ua.ExtensionObject{
			ua.NewExtensionObject(&ua.ElementOperand{Index: 1}), ua.NewExtensionObject(&ua.ElementOperand{Index: 2})}},
		{FilterOperator: ua.FilterOperatorOfType, FilterOperands: []*ua.ExtensionObject{literal(ua.NewNumericNodeID(0, id.OffNormalAlarmType))}},
		{FilterOperator: ua.FilterOperatorGreaterThanOrEqual, FilterOperands: []*ua.ExtensionObject{
			ua.NewExtensionObject(uaevents.Field(id.BaseEventType, "Severity")), literal(int32(500))}},
	}}
	es := uaevents.Subscribe(t, c, ua.NewNumericNodeID(0, id.Server), &ua.EventFilter{SelectClauses: alarmSelect, WhereClause: where})
	if es.Result.StatusCode != ua.StatusOK {
		t.Fatalf("item: %+v", es.Result)
	}
	ts.ConditionChanged(Condition{ID: "low-native", Source: "Pump1", Severity: 200, Message: "low native", Active: true, Seq: 1})
	ts.ConditionChanged(pumpAlarm(1, true, false)) // a limit alarm, severe
	ts.ConditionChanged(Condition{ID: "high-native", Source: "Pump1", Severity: 900, Message: "high native", Active: true, Seq: 1})
	if got := next(t, es); got[fMessage].Value().(*ua.LocalizedText).Text != "high native" {
		t.Fatalf("first event through the where clause: %v", got[fMessage].Value())
	}
	es.None(t, 300*time.Millisecond)
}

// Filters a server must answer with Bad statuses and go on serving.
func TestHostileEventFilters(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	c := connect(t, ts.Endpoint())
	ctx := context.Background()
	raw := make(chan *gopcua.PublishNotificationData, 16)
	sub, err := c.Subscribe(ctx, &gopcua.SubscriptionParameters{Interval: 50 * time.Millisecond}, raw)
	if err != nil {
		t.Fatal(err)
	}
	server := ua.NewNumericNodeID(0, id.Server)
	item := func(nid *ua.NodeID, f any) *ua.MonitoredItemCreateRequest {
		r := gopcua.NewMonitoredItemCreateRequestWithDefaults(nid, ua.AttributeIDEventNotifier, 9)
		if ef, ok := f.(*ua.EventFilter); ok {
			f = uaevents.WithWhere(ef)
		}
		if f != nil {
			r.RequestedParameters.Filter = ua.NewExtensionObject(f)
		}
		return r
	}
	like := &ua.ContentFilter{Elements: []*ua.ContentFilterElement{{FilterOperator: ua.FilterOperatorLike,
		FilterOperands: []*ua.ExtensionObject{ua.NewExtensionObject(uaevents.Field(id.BaseEventType, "Message")), ua.NewExtensionObject(&ua.LiteralOperand{Value: ua.MustVariant("x%")})}}}}
	unknownOp := &ua.ContentFilter{Elements: []*ua.ContentFilterElement{{FilterOperator: 200}}}
	loop := &ua.ContentFilter{Elements: []*ua.ContentFilterElement{{FilterOperator: ua.FilterOperatorNot,
		FilterOperands: []*ua.ExtensionObject{ua.NewExtensionObject(&ua.ElementOperand{Index: 0})}}}}
	tests := []struct {
		name     string
		item     *ua.MonitoredItemCreateRequest
		want     ua.StatusCode
		selects  []ua.StatusCode
		elements []ua.StatusCode
	}{
		{"unknown field among good ones", item(server, &ua.EventFilter{SelectClauses: []*ua.SimpleAttributeOperand{uaevents.Field(id.BaseEventType, "Severity"), uaevents.Field(id.BaseEventType, "NoSuchField"), uaevents.Field(id.BaseEventType, "ActiveState", "Id")}}),
			ua.StatusOK, []ua.StatusCode{ua.StatusOK, ua.StatusBadNodeIDUnknown, ua.StatusOK}, nil},
		{"field of a type that lacks it", item(server, &ua.EventFilter{SelectClauses: []*ua.SimpleAttributeOperand{uaevents.Field(id.BaseEventType, "Severity"), uaevents.Field(id.ConditionType, "ActiveState", "Id")}}),
			ua.StatusOK, []ua.StatusCode{ua.StatusOK, ua.StatusBadNodeIDUnknown}, nil},
		{"unknown type", item(server, &ua.EventFilter{SelectClauses: []*ua.SimpleAttributeOperand{uaevents.Field(id.BaseEventType, "Severity"), uaevents.Field(99999, "Severity")}}),
			ua.StatusOK, []ua.StatusCode{ua.StatusOK, ua.StatusBadTypeDefinitionInvalid}, nil},
		{"no usable select clause", item(server, &ua.EventFilter{SelectClauses: []*ua.SimpleAttributeOperand{uaevents.Field(id.BaseEventType, "Nope")}}), ua.StatusBadEventFilterInvalid, []ua.StatusCode{ua.StatusBadNodeIDUnknown}, nil},
		{"no select clause", item(server, &ua.EventFilter{}), ua.StatusBadEventFilterInvalid, nil, nil},
		{"no filter", item(server, nil), ua.StatusBadEventFilterInvalid, nil, nil},
		{"a data change filter", item(server, &ua.DataChangeFilter{Trigger: ua.DataChangeTriggerStatusValue}), ua.StatusBadEventFilterInvalid, nil, nil},
		{"operator not supported", item(server, &ua.EventFilter{SelectClauses: alarmSelect, WhereClause: like}), ua.StatusBadMonitoredItemFilterInvalid, nil, []ua.StatusCode{ua.StatusBadFilterOperatorUnsupported}},
		{"operator unknown", item(server, &ua.EventFilter{SelectClauses: alarmSelect, WhereClause: unknownOp}), ua.StatusBadMonitoredItemFilterInvalid, nil, []ua.StatusCode{ua.StatusBadFilterOperatorInvalid}},
		{"element refers to itself", item(server, &ua.EventFilter{SelectClauses: alarmSelect, WhereClause: loop}), ua.StatusBadMonitoredItemFilterInvalid, nil, []ua.StatusCode{ua.StatusBadFilterOperandInvalid}},
		{"a variable is no notifier", item(ts.NodeID("Pump1", "Speed"), &ua.EventFilter{SelectClauses: alarmSelect}), ua.StatusBadAttributeIDInvalid, nil, nil},
		{"unknown node", item(ua.NewStringNodeID(2, "Nope"), &ua.EventFilter{SelectClauses: alarmSelect}), ua.StatusBadNodeIDUnknown, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := sub.Monitor(ctx, ua.TimestampsToReturnBoth, tt.item)
			if err != nil {
				t.Fatalf("monitor: %v", err)
			}
			r := res.Results[0]
			if r.StatusCode != tt.want {
				t.Fatalf("status %v, want %v", r.StatusCode, tt.want)
			}
			if tt.selects == nil && tt.elements == nil {
				return
			}
			fr, ok := r.FilterResult.Value.(*ua.EventFilterResult)
			if !ok {
				t.Fatalf("filter result %T, want an EventFilterResult", r.FilterResult.Value)
			}
			if tt.selects != nil && fmt.Sprint(fr.SelectClauseResults) != fmt.Sprint(tt.selects) {
				t.Fatalf("select clause results %v, want %v", fr.SelectClauseResults, tt.selects)
			}
			for i, want := range tt.elements {
				if got := fr.WhereClauseResult.ElementResults[i].StatusCode; got != want {
					t.Fatalf("where element %d: %v, want %v", i, got, want)
				}
			}
		})
	}
	// Still serving.
	if dv := readValue(t, c, serviceLevelID, ua.AttributeIDValue); dv.Status != ua.StatusOK {
		t.Fatalf("read after hostile filters: %v", dv.Status)
	}
}

var (
	conditionTypeID = ua.NewNumericNodeID(0, id.ConditionType)
	refreshID       = ua.NewNumericNodeID(0, id.ConditionType_ConditionRefresh)
	acknowledgeID   = ua.NewNumericNodeID(0, id.AcknowledgeableConditionType_Acknowledge)
	confirmID       = ua.NewNumericNodeID(0, id.AcknowledgeableConditionType_Confirm)
	addCommentID    = ua.NewNumericNodeID(0, id.ConditionType_AddComment)
)

func TestConditionRefreshReplaysRetainedConditions(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	ts.SetConditions([]Condition{
		{ID: "a", Source: "Pump1", Severity: 100, Message: "a active", Active: true, Seq: 3},
		{ID: "b", Source: "Tank1", Severity: 100, Message: "b cleared, unacknowledged", Seq: 2},
		{ID: "c", Source: "Tank1", Severity: 100, Message: "c over", Acked: true, Seq: 4},
	})
	c := connect(t, ts.Endpoint())
	es := uaevents.Subscribe(t, c, ua.NewNumericNodeID(0, id.Server), &ua.EventFilter{SelectClauses: alarmSelect})
	es.None(t, 200*time.Millisecond) // SetConditions reports nothing
	if res := uaevents.Call(t, c, conditionTypeID, refreshID, es.SubscriptionID); res.StatusCode != ua.StatusOK {
		t.Fatalf("ConditionRefresh: %v", res.StatusCode)
	}
	var types []uint32
	var msgs []string
	for len(types) < 4 {
		e := next(t, es)
		types = append(types, e[fEventType].Value().(*ua.NodeID).IntID())
		msgs = append(msgs, e[fMessage].Value().(*ua.LocalizedText).Text)
	}
	want := []uint32{id.RefreshStartEventType, id.OffNormalAlarmType, id.OffNormalAlarmType, id.RefreshEndEventType}
	if fmt.Sprint(types) != fmt.Sprint(want) || msgs[1] != "a active" || msgs[2] != "b cleared, unacknowledged" {
		t.Fatalf("refresh events %v %q", types, msgs)
	}
	es.None(t, 200*time.Millisecond)

	// Another session's subscription is unknown to this one.
	other := connect(t, ts.Endpoint())
	if res := uaevents.Call(t, other, conditionTypeID, refreshID, es.SubscriptionID); res.StatusCode != ua.StatusBadSubscriptionIDInvalid {
		t.Fatalf("refresh of a foreign subscription: %v", res.StatusCode)
	}
	if res := uaevents.Call(t, c, conditionTypeID, refreshID); res.StatusCode != ua.StatusBadArgumentsMissing {
		t.Fatalf("refresh without arguments: %v", res.StatusCode)
	}
	if res := uaevents.Call(t, c, conditionTypeID, refreshID, "x"); res.StatusCode != ua.StatusBadInvalidArgument || res.InputArgumentResults[0] != ua.StatusBadTypeMismatch {
		t.Fatalf("refresh with a string: %+v", res)
	}
}

func TestAlarmMethods(t *testing.T) {
	alarms := &fakeAlarms{}
	ts := startServer(t, activeState(), func(*Config) {})
	ts.alarms = alarms
	ts.SetConditions([]Condition{pumpAlarm(5, true, false)})
	c := connect(t, ts.Endpoint())
	cond := ts.ns.conditionID("P1-HI")
	comment := &ua.LocalizedText{Text: "seen", EncodingMask: ua.LocalizedTextText}
	current := eventID(pumpAlarm(5, true, false))

	tests := []struct {
		name   string
		obj    *ua.NodeID
		method *ua.NodeID
		args   []any
		want   ua.StatusCode
	}{
		{"stale EventId", cond, acknowledgeID, []any{eventID(pumpAlarm(4, true, false)), comment}, ua.StatusBadEventIDUnknown},
		{"unknown object", ua.NewStringNodeID(ts.ns.idx, "alarm:nope"), acknowledgeID, []any{current, comment}, ua.StatusBadNodeIDUnknown},
		{"unknown method", cond, ua.NewNumericNodeID(0, 424242), []any{current, comment}, ua.StatusBadMethodInvalid},
		{"method of another object", ts.NodeID("Pump1", "Speed"), acknowledgeID, []any{current, comment}, ua.StatusBadMethodInvalid},
		{"refresh on a condition", cond, refreshID, []any{uint32(1)}, ua.StatusBadMethodInvalid},
		{"too many arguments", cond, acknowledgeID, []any{current, comment, int32(1)}, ua.StatusBadTooManyArguments},
		{"wrong types", cond, acknowledgeID, []any{"text", comment}, ua.StatusBadInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if res := uaevents.Call(t, c, tt.obj, tt.method, tt.args...); res.StatusCode != tt.want {
				t.Fatalf("%v, want %v", res.StatusCode, tt.want)
			}
		})
	}
	if got := alarms.Calls(); len(got) != 0 {
		t.Fatalf("refused calls reached the alarm service: %v", got)
	}

	if res := uaevents.Call(t, c, cond, acknowledgeID, current, comment); res.StatusCode != ua.StatusOK {
		t.Fatalf("Acknowledge: %v", res.StatusCode)
	}
	if res := uaevents.Call(t, c, cond, addCommentID, current, comment); res.StatusCode != ua.StatusOK {
		t.Fatalf("AddComment: %v", res.StatusCode)
	}
	if got, want := fmt.Sprint(alarms.Calls()), "[ack P1-HI by anonymous: seen comment P1-HI by anonymous: seen]"; got != want {
		t.Fatalf("calls %s, want %s", got, want)
	}
	// The replicated state follows: the condition is acknowledged.
	acked := pumpAlarm(6, true, true)
	ts.ConditionChanged(acked)
	if res := uaevents.Call(t, c, cond, acknowledgeID, eventID(acked), comment); res.StatusCode != ua.StatusBadConditionBranchAlreadyAcked {
		t.Fatalf("second Acknowledge: %v", res.StatusCode)
	}
	// A Standby's alarm service refuses: BadInvalidState.
	alarms.err = fmt.Errorf("confirm alarm: %w", notActive{})
	if res := uaevents.Call(t, c, cond, confirmID, eventID(acked), comment); res.StatusCode != ua.StatusBadInvalidState {
		t.Fatalf("Confirm refused by the gate: %v", res.StatusCode)
	}
	alarms.err = errors.New("gateway unreachable")
	if res := uaevents.Call(t, c, cond, confirmID, eventID(acked), comment); res.StatusCode != ua.StatusBadCommunicationError {
		t.Fatalf("Confirm failing at the gateway: %v", res.StatusCode)
	}
}

func TestConditionNodesBrowseAndRead(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	ts.SetConditions([]Condition{pumpAlarm(2, true, false), {ID: "gw-1", Source: "Boiler", Name: "Trip", Severity: 800, Active: true, Seq: 1}})
	c := connect(t, ts.Endpoint())
	browse := func(nid *ua.NodeID, refType uint32) map[string]string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		resp, err := c.Browse(ctx, &ua.BrowseRequest{NodesToBrowse: []*ua.BrowseDescription{{NodeID: nid, BrowseDirection: ua.BrowseDirectionForward,
			ReferenceTypeID: ua.NewNumericNodeID(0, refType), IncludeSubtypes: true, ResultMask: uint32(ua.BrowseResultMaskAll)}}})
		if err != nil || resp.Results[0].StatusCode != ua.StatusGood {
			t.Fatalf("browse %v: %v %v", nid, err, resp)
		}
		out := map[string]string{}
		for _, r := range resp.Results[0].References {
			out[r.BrowseName.Name] = r.NodeID.NodeID.String()
		}
		return out
	}
	if got := browse(ua.NewNumericNodeID(0, id.Server), id.HasNotifier); got["Pump1"] != ts.ns.folderID("Pump1").String() {
		t.Fatalf("Server's notifiers: %v", got)
	}
	if got := browse(ts.ns.folderID("Pump1"), id.HasCondition); got["P1-HI"] != ts.ns.conditionID("P1-HI").String() {
		t.Fatalf("Pump1's conditions: %v", got)
	}
	// A condition whose source is no instance hangs under the site folder.
	if got := browse(ts.ns.rootID(), id.HasComponent); got["gw-1"] == "" {
		t.Fatalf("site folder's conditions: %v", got)
	}
	fields := browse(ts.ns.conditionID("P1-HI"), id.HierarchicalReferences)
	for _, f := range []string{"EventId", "Severity", "Message", "ActiveState", "AckedState", "ConfirmedState", "EnabledState", "Retain", "Comment"} {
		if fields[f] == "" {
			t.Fatalf("condition has no %s: %v", f, fields)
		}
	}
	active := browse(ts.fieldID("P1-HI", "ActiveState"), id.HasProperty)
	if active["Id"] == "" {
		t.Fatalf("ActiveState has no Id: %v", active)
	}
	idNode, _ := ua.ParseNodeID(active["Id"])
	if dv := readValue(t, c, idNode, ua.AttributeIDValue); dv.Value.Value() != true {
		t.Fatalf("ActiveState/Id = %v", dv.Value)
	}
	sevNode, _ := ua.ParseNodeID(fields["Severity"])
	if dv := readValue(t, c, sevNode, ua.AttributeIDValue); dv.Value.Value() != uint16(700) {
		t.Fatalf("Severity = %v", dv.Value)
	}
	if dv := readValue(t, c, sevNode, ua.AttributeIDDataType); dv.Value.Value().(*ua.NodeID).IntID() != id.UInt16 {
		t.Fatalf("Severity's DataType = %v", dv.Value)
	}
	if dv := readValue(t, c, ts.ns.folderID("Pump1"), ua.AttributeIDEventNotifier); dv.Value.Value() != byte(1) {
		t.Fatalf("Pump1's EventNotifier = %v", dv.Value)
	}
	if dv := readValue(t, c, ua.NewNumericNodeID(0, id.Server), ua.AttributeIDEventNotifier); dv.Value.Value() != byte(1) {
		t.Fatalf("Server's EventNotifier = %v", dv.Value)
	}
	if dv := readValue(t, c, ts.ns.conditionID("P1-HI"), ua.AttributeIDNodeClass); dv.Value.Value() != int32(ua.NodeClassObject) {
		t.Fatalf("condition's NodeClass = %v", dv.Value)
	}
	// Browse paths reach into conditions too: Pump1/P1-HI/ActiveState/Id.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	elem := func(ns uint16, name string) *ua.RelativePathElement {
		return &ua.RelativePathElement{ReferenceTypeID: ua.NewNumericNodeID(0, id.HierarchicalReferences), IncludeSubtypes: true, TargetName: &ua.QualifiedName{NamespaceIndex: ns, Name: name}}
	}
	resp, err := send[*ua.TranslateBrowsePathsToNodeIDsResponse](ctx, c, &ua.TranslateBrowsePathsToNodeIDsRequest{BrowsePaths: []*ua.BrowsePath{{
		StartingNode: ts.ns.folderID("Pump1"),
		RelativePath: &ua.RelativePath{Elements: []*ua.RelativePathElement{elem(ts.ns.idx, "P1-HI"), elem(0, "ActiveState"), elem(0, "Id")}},
	}}})
	if err != nil || len(resp.Results) != 1 || resp.Results[0].StatusCode != ua.StatusOK || len(resp.Results[0].Targets) != 1 ||
		resp.Results[0].Targets[0].TargetID.NodeID.String() != ts.fieldID("P1-HI", "ActiveState/Id").String() {
		t.Fatalf("translate Pump1/P1-HI/ActiveState/Id: %v %+v", err, resp)
	}
}

// An event item keeps at most its queue size of ordinary events (the
// oldest dropped and counted); a ConditionRefresh's events come on top of
// it, and a second refresh while one waits is BadRefreshInProgress.
func TestEventQueueBoundAndRefreshInProgress(t *testing.T) {
	f := newSubFixture(t)
	server := ua.NewNumericNodeID(0, id.Server)
	f.nodes.set(server, byte(0), ua.StatusOK, f.clock.Now())
	f.m.notifierOf = func(nid *ua.NodeID) (string, bool, bool) { return "", true, nid.String() == server.String() }
	sub := f.createSub(1, 100, 1000, 3000)
	item := gopcua.NewMonitoredItemCreateRequestWithDefaults(server, ua.AttributeIDEventNotifier, 5)
	item.RequestedParameters.QueueSize = 3
	item.RequestedParameters.Filter = ua.NewExtensionObject(&ua.EventFilter{SelectClauses: []*ua.SimpleAttributeOperand{uaevents.Field(id.BaseEventType, "Message")}})
	resp, err := f.m.createMonitoredItems(nil, &ua.CreateMonitoredItemsRequest{RequestHeader: header(1), SubscriptionID: sub,
		TimestampsToReturn: ua.TimestampsToReturnBoth, ItemsToCreate: []*ua.MonitoredItemCreateRequest{item}}, 0)
	if err != nil || resp.(*ua.CreateMonitoredItemsResponse).Results[0].RevisedQueueSize != 3 {
		t.Fatalf("event item: %v %+v", err, resp)
	}
	ev := func(msg string) *event {
		return &event{typeID: id.OffNormalAlarmType, source: "Pump1", fields: map[string]any{"Message": localized(msg)}}
	}
	for i := range 5 {
		f.m.event(ev(fmt.Sprintf("e%d", i)))
	}
	if got := metricValue(t, f.metrics.eventsDropped); got != 2 {
		t.Fatalf("events dropped %v, want 2", got)
	}
	var conds []*event
	for i := range 10 {
		conds = append(conds, ev(fmt.Sprintf("c%d", i)))
	}
	key := tokenKey(header(1).AuthenticationToken)
	start, end := refreshEvent(id.RefreshStartEventType, []byte("s"), f.clock.Now()), refreshEvent(id.RefreshEndEventType, []byte("e"), f.clock.Now())
	if code := f.m.conditionRefresh(key, sub, 0, start, end, conds); code != ua.StatusOK {
		t.Fatalf("refresh: %v", code)
	}
	if code := f.m.conditionRefresh(key, sub, 0, start, end, conds); code != ua.StatusBadRefreshInProgress {
		t.Fatalf("second refresh while the first waits: %v", code)
	}
	if code := f.m.conditionRefresh(tokenKey(header(2).AuthenticationToken), sub, 0, start, end, conds); code != ua.StatusBadSubscriptionIDInvalid {
		t.Fatalf("refresh of another session's subscription: %v", code)
	}
	id1, _ := f.publish(1)
	f.step(100 * time.Millisecond)
	pr, ok := f.answer(id1).(*ua.PublishResponse)
	if !ok || len(pr.NotificationMessage.NotificationData) != 1 {
		t.Fatalf("publish answer %+v", pr)
	}
	list, ok := pr.NotificationMessage.NotificationData[0].Value.(*ua.EventNotificationList)
	if !ok {
		t.Fatalf("notification %T", pr.NotificationMessage.NotificationData[0].Value)
	}
	var msgs []string
	for _, e := range list.Events {
		msgs = append(msgs, e.EventFields[0].Value().(*ua.LocalizedText).Text)
	}
	want := "[e2 e3 e4 ConditionRefresh start c0 c1 c2 c3 c4 c5 c6 c7 c8 c9 ConditionRefresh end]"
	if fmt.Sprint(msgs) != want {
		t.Fatalf("events %v, want %s", msgs, want)
	}
	if code := f.m.conditionRefresh(key, sub, 0, start, end, conds); code != ua.StatusOK {
		t.Fatalf("refresh after the first was delivered: %v", code)
	}
}
