package opcua

import (
	"context"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

// TestAnalogItems: an attribute with units and an EURange in the site
// config is an AnalogItemType variable with EngineeringUnits (EUInformation)
// and EURange (Range) properties, browsable and read-only; one with units
// alone a BaseAnalogType with EngineeringUnits; a percent deadband is a
// percentage of the EURange, and refused (BadFilterNotAllowed) where there
// is none.
func TestAnalogItems(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	if _, err := ts.ApplyModel(Model{Instances: []Instance{{Name: "Boiler", Attributes: []Attribute{
		{Name: "Temp", Type: TypeDouble, Units: "degC", EURange: &Range{Low: 0, High: 200}},
		{Name: "Flow", Type: TypeDouble, Units: "m3/h"},
		{Name: "Count", Type: TypeInt32},
	}}}}); err != nil {
		t.Fatal(err)
	}
	c := connect(t, ts.Endpoint())
	temp, flow, count := ts.NodeID("Boiler", "Temp"), ts.NodeID("Boiler", "Flow"), ts.NodeID("Boiler", "Count")

	props := func(nid *ua.NodeID) (typeDef uint32, names map[string]*ua.NodeID) {
		names = map[string]*ua.NodeID{}
		for _, r := range browseAll(t, c, nid) {
			switch {
			case r.ReferenceTypeID.IntID() == id.HasTypeDefinition && r.IsForward:
				typeDef = r.NodeID.NodeID.IntID()
			case r.ReferenceTypeID.IntID() == id.HasProperty && r.IsForward:
				if r.BrowseName.NamespaceIndex != 0 {
					t.Errorf("%v: property %s's BrowseName is in namespace %d, want 0", nid, r.BrowseName.Name, r.BrowseName.NamespaceIndex)
				}
				names[r.BrowseName.Name] = r.NodeID.NodeID
			}
		}
		return typeDef, names
	}
	typeDef, tempProps := props(temp)
	if typeDef != id.AnalogItemType || len(tempProps) != 2 || tempProps["EngineeringUnits"] == nil || tempProps["EURange"] == nil {
		t.Fatalf("Boiler.Temp: type i=%d, properties %v; want AnalogItemType with EngineeringUnits and EURange", typeDef, tempProps)
	}
	if typeDef, p := props(flow); typeDef != id.BaseAnalogType || len(p) != 1 || p["EngineeringUnits"] == nil {
		t.Errorf("Boiler.Flow: type i=%d, properties %v; want BaseAnalogType with EngineeringUnits", typeDef, p)
	}
	if typeDef, p := props(count); typeDef != id.BaseDataVariableType || len(p) != 0 {
		t.Errorf("Boiler.Count: type i=%d, properties %v; want a plain variable", typeDef, p)
	}

	eu := readValue(t, c, tempProps["EngineeringUnits"], ua.AttributeIDValue)
	eo, _ := eu.Value.Value().(*ua.ExtensionObject)
	if info, ok := eo.Value.(*ua.EUInformation); !ok || info.DisplayName.Text != "degC" || info.UnitID != -1 || info.NamespaceURI != unitsNamespace {
		t.Errorf("EngineeringUnits = %#v", eo)
	}
	rng := readValue(t, c, tempProps["EURange"], ua.AttributeIDValue)
	eo, _ = rng.Value.Value().(*ua.ExtensionObject)
	if r, ok := eo.Value.(*ua.Range); !ok || r.Low != 0 || r.High != 200 {
		t.Errorf("EURange = %#v", eo)
	}
	for prop, want := range map[string]uint32{"EngineeringUnits": id.EUInformation, "EURange": id.Range} {
		if dt, ok := readValue(t, c, tempProps[prop], ua.AttributeIDDataType).Value.Value().(*ua.NodeID); !ok || dt.IntID() != want {
			t.Errorf("%s DataType %v, want i=%d", prop, dt, want)
		}
		if typeDef, _ := props(tempProps[prop]); typeDef != id.PropertyType {
			t.Errorf("%s TypeDefinition i=%d, want PropertyType", prop, typeDef)
		}
		if code := writeValue(t, c, tempProps[prop], ua.AttributeIDValue, ua.MustVariant(1.0)); code == ua.StatusOK {
			t.Errorf("a write to %s was accepted", prop)
		}
	}

	// A 10 % deadband on 0..200 is an absolute one of 20.
	sub, err := c.Subscribe(context.Background(), &gopcua.SubscriptionParameters{Interval: 100 * time.Millisecond}, make(chan *gopcua.PublishNotificationData, 8))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Cancel(context.Background())
	percent := ua.NewExtensionObject(&ua.DataChangeFilter{Trigger: ua.DataChangeTriggerStatusValue, DeadbandType: uint32(ua.DeadbandTypePercent), DeadbandValue: 10})
	item := func(nid *ua.NodeID, handle uint32) *ua.MonitoredItemCreateRequest {
		return &ua.MonitoredItemCreateRequest{ItemToMonitor: &ua.ReadValueID{NodeID: nid, AttributeID: ua.AttributeIDValue, DataEncoding: &ua.QualifiedName{}},
			MonitoringMode: ua.MonitoringModeReporting, RequestedParameters: &ua.MonitoringParameters{ClientHandle: handle, QueueSize: 1, Filter: percent}}
	}
	res, err := sub.Monitor(context.Background(), ua.TimestampsToReturnBoth, item(temp, 1), item(flow, 2))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) != 2 || res.Results[0].StatusCode != ua.StatusOK || res.Results[1].StatusCode != ua.StatusBadFilterNotAllowed {
		t.Fatalf("percent deadband on Temp (EURange) and Flow (none): %v, want Good and BadFilterNotAllowed", statuses(res.Results))
	}
	f, code := itemFilter(percent, func() (float64, float64, bool) { return 0, 200, true })
	if code != ua.StatusOK || f.deadband != 20 {
		t.Errorf("10 %% of 0..200: deadband %v (%v), want 20", f.deadband, code)
	}
	last := &ua.DataValue{Value: ua.MustVariant(100.0)}
	if triggers(f, last, &ua.DataValue{Value: ua.MustVariant(119.0)}) || !triggers(f, last, &ua.DataValue{Value: ua.MustVariant(121.0)}) {
		t.Error("a 10 % deadband on 0..200 did not hold back 19 or did not pass 21")
	}
	if _, code := itemFilter(ua.NewExtensionObject(&ua.DataChangeFilter{Trigger: ua.DataChangeTriggerStatusValue, DeadbandType: uint32(ua.DeadbandTypePercent), DeadbandValue: 150}),
		func() (float64, float64, bool) { return 0, 200, true }); code != ua.StatusBadDeadbandFilterInvalid {
		t.Errorf("a 150 %% deadband: %v, want BadDeadbandFilterInvalid", code)
	}
	if _, err := ts.ApplyModel(Model{Instances: []Instance{{Name: "Boiler", Attributes: []Attribute{
		{Name: "Temp", Type: TypeDouble, EURange: &Range{Low: 5, High: 5}}}}}}); err == nil {
		t.Error("an EURange of 5..5 was accepted")
	}
}

func statuses(rs []*ua.MonitoredItemCreateResult) []ua.StatusCode {
	var out []ua.StatusCode
	for _, r := range rs {
		out = append(out, r.StatusCode)
	}
	return out
}

// TestPercentDeadbandFollowsEURange: a percent deadband is a percentage of
// the EURange the variable has now (Part 8, 6.2 in 1.04, 7.2 in 1.05: each
// change is compared with deadbandValue/100 x (high - low) of the
// EURange), not the one it had when the item was created: a deploy that
// narrows the range narrows the deadband of existing items.
func TestPercentDeadbandFollowsEURange(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	model := func(high float64) Model {
		return Model{Instances: []Instance{{Name: "Boiler", Attributes: []Attribute{
			{Name: "Temp", Type: TypeDouble, Units: "degC", EURange: &Range{Low: 0, High: high}}}}}}
	}
	if _, err := ts.ApplyModel(model(200)); err != nil {
		t.Fatal(err)
	}
	c := connect(t, ts.Endpoint())
	temp := ts.NodeID("Boiler", "Temp")
	if err := ts.TagUpdate("Boiler", "Temp", 100.0, ua.StatusOK, time.Now()); err != nil {
		t.Fatal(err)
	}
	notes := make(chan *gopcua.PublishNotificationData, 16)
	sub, err := c.Subscribe(context.Background(), &gopcua.SubscriptionParameters{Interval: 50 * time.Millisecond}, notes)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Cancel(context.Background())
	percent := ua.NewExtensionObject(&ua.DataChangeFilter{Trigger: ua.DataChangeTriggerStatusValue, DeadbandType: uint32(ua.DeadbandTypePercent), DeadbandValue: 10})
	res, err := sub.Monitor(context.Background(), ua.TimestampsToReturnBoth, &ua.MonitoredItemCreateRequest{
		ItemToMonitor:  &ua.ReadValueID{NodeID: temp, AttributeID: ua.AttributeIDValue, DataEncoding: &ua.QualifiedName{}},
		MonitoringMode: ua.MonitoringModeReporting, RequestedParameters: &ua.MonitoringParameters{ClientHandle: 1, QueueSize: 1, Filter: percent}})
	if err != nil || res.Results[0].StatusCode != ua.StatusOK {
		t.Fatalf("monitor: %v %v", err, res)
	}
	next := func(within time.Duration) (float64, bool) {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case n := <-notes:
				if n.Error != nil {
					t.Fatal(n.Error)
				}
				if dc, ok := n.Value.(*ua.DataChangeNotification); ok && len(dc.MonitoredItems) > 0 {
					return dc.MonitoredItems[len(dc.MonitoredItems)-1].Value.Value.Value().(float64), true
				}
			case <-deadline:
				return 0, false
			}
		}
	}
	if v, ok := next(3 * time.Second); !ok || v != 100 {
		t.Fatalf("first value %v (%v), want 100", v, ok)
	}
	// 10 % of 0..200 is 20: a move of 5 is held back.
	if err := ts.TagUpdate("Boiler", "Temp", 105.0, ua.StatusOK, time.Now()); err != nil {
		t.Fatal(err)
	}
	if v, ok := next(500 * time.Millisecond); ok {
		t.Fatalf("a move of 5 within a 10 %% deadband of 0..200 was reported: %v", v)
	}
	// The range becomes 0..20: 10 % is 2, and a move of 5 is reported.
	if _, err := ts.ApplyModel(model(20)); err != nil {
		t.Fatal(err)
	}
	if err := ts.TagUpdate("Boiler", "Temp", 110.0, ua.StatusOK, time.Now()); err != nil {
		t.Fatal(err)
	}
	if v, ok := next(3 * time.Second); !ok || v != 110 {
		t.Fatalf("after the EURange became 0..20, a move of 5 (105 -> 110) was not reported (got %v, %v): the deadband kept the old range", v, ok)
	}
}
