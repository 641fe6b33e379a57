package opcua

import (
	"context"
	"testing"
	"time"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

// TranslateBrowsePathsToNodeIds resolves paths through both namespaces, as
// an HMI resolves a tag by its path (the library answered
// BadServiceUnsupported): every element's ReferenceTypeId, IncludeSubtypes
// and IsInverse as Part 4 (7.26) has them, into a variable's properties.
func TestTranslateBrowsePaths(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	if _, err := ts.ApplyModel(Model{Instances: []Instance{{Name: "Pump1", Attributes: []Attribute{{Name: "Speed", Type: TypeDouble}}},
		{Name: "Boiler", Attributes: []Attribute{{Name: "Temp", Type: TypeDouble, Units: "degC", EURange: &Range{Low: 0, High: 200}}}}}}); err != nil {
		t.Fatal(err)
	}
	c := connect(t, ts.Endpoint())
	site := ts.ns.idx
	step := func(ns uint16, name string, ref uint32, subtypes bool) *ua.RelativePathElement {
		return &ua.RelativePathElement{ReferenceTypeID: ua.NewNumericNodeID(0, ref), IncludeSubtypes: subtypes, TargetName: &ua.QualifiedName{NamespaceIndex: ns, Name: name}}
	}
	objects := ua.NewNumericNodeID(0, id.ObjectsFolder)
	paths := []*ua.BrowsePath{
		{StartingNode: objects, RelativePath: &ua.RelativePath{Elements: []*ua.RelativePathElement{
			step(site, ts.ns.siteName, id.HierarchicalReferences, true), step(site, "Pump1", id.HierarchicalReferences, true), step(site, "Speed", id.HasComponent, false)}}},
		{StartingNode: objects, RelativePath: &ua.RelativePath{Elements: []*ua.RelativePathElement{
			step(0, "Server", id.Organizes, false), step(0, "ServiceLevel", id.HasProperty, false)}}},
		{StartingNode: objects, RelativePath: &ua.RelativePath{Elements: []*ua.RelativePathElement{
			step(site, ts.ns.siteName, id.HierarchicalReferences, true), step(site, "Pump9", id.HierarchicalReferences, true)}}},
		{StartingNode: ua.NewStringNodeID(site, "Nope"), RelativePath: &ua.RelativePath{Elements: []*ua.RelativePathElement{step(site, "x", id.HierarchicalReferences, true)}}},
		{StartingNode: objects, RelativePath: &ua.RelativePath{}},
		// Up a HasProperty reference (IsInverse): the library named the
		// inverse references of the variables scadad serves "Parent".
		{StartingNode: ua.NewNumericNodeID(0, id.Server_ServiceLevel), RelativePath: &ua.RelativePath{Elements: []*ua.RelativePathElement{
			{ReferenceTypeID: ua.NewNumericNodeID(0, id.HasProperty), IsInverse: true, TargetName: &ua.QualifiedName{Name: "Server"}}}}},
		// HasChild without its subtypes matches no HasComponent (the
		// library matched subtypes whatever IncludeSubtypes said).
		{StartingNode: ua.NewNumericNodeID(0, id.Server), RelativePath: &ua.RelativePath{Elements: []*ua.RelativePathElement{
			step(0, "ServerStatus", id.HasChild, false)}}},
		// Aggregates with subtypes follows HasComponent and HasProperty.
		{StartingNode: ua.NewNumericNodeID(0, id.Server), RelativePath: &ua.RelativePath{Elements: []*ua.RelativePathElement{
			step(0, "ServerDiagnostics", id.Aggregates, true), step(0, "EnabledFlag", id.Aggregates, true)}}},
		// Into a variable's properties: instance/attribute/EURange by
		// hierarchical references, and down again to EngineeringUnits.
		{StartingNode: ts.ns.folderID("Boiler"), RelativePath: &ua.RelativePath{Elements: []*ua.RelativePathElement{
			step(site, "Temp", id.HierarchicalReferences, true), step(0, "EURange", id.HierarchicalReferences, true)}}},
		{StartingNode: ts.ns.propID("Boiler", "Temp", "EURange"), RelativePath: &ua.RelativePath{Elements: []*ua.RelativePathElement{
			{ReferenceTypeID: ua.NewNumericNodeID(0, id.HasProperty), IsInverse: true, TargetName: &ua.QualifiedName{NamespaceIndex: site, Name: "Temp"}},
			step(0, "EngineeringUnits", id.HasProperty, false)}}},
		// A null ReferenceTypeId follows every reference (Part 4, 7.26),
		// HasTypeDefinition too.
		{StartingNode: ua.NewNumericNodeID(0, id.Server), RelativePath: &ua.RelativePath{Elements: []*ua.RelativePathElement{
			{ReferenceTypeID: ua.NewTwoByteNodeID(0), TargetName: &ua.QualifiedName{Name: "ServerType"}}}}},
	}
	want := []struct {
		status ua.StatusCode
		target *ua.NodeID
	}{
		{ua.StatusOK, ts.NodeID("Pump1", "Speed")},
		{ua.StatusOK, ua.NewNumericNodeID(0, id.Server_ServiceLevel)},
		{ua.StatusBadNoMatch, nil},
		{ua.StatusBadNodeIDUnknown, nil},
		{ua.StatusBadNothingToDo, nil},
		{ua.StatusOK, ua.NewNumericNodeID(0, id.Server)},
		{ua.StatusBadNoMatch, nil},
		{ua.StatusOK, ua.NewNumericNodeID(0, id.Server_ServerDiagnostics_EnabledFlag)},
		{ua.StatusOK, ts.ns.propID("Boiler", "Temp", "EURange")},
		{ua.StatusOK, ts.ns.propID("Boiler", "Temp", "EngineeringUnits")},
		{ua.StatusOK, ua.NewNumericNodeID(0, id.ServerType)},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := send[*ua.TranslateBrowsePathsToNodeIDsResponse](ctx, c, &ua.TranslateBrowsePathsToNodeIDsRequest{BrowsePaths: paths})
	if err != nil {
		t.Fatalf("TranslateBrowsePathsToNodeIds: %v", err)
	}
	if len(resp.Results) != len(want) {
		t.Fatalf("%d results, want %d", len(resp.Results), len(want))
	}
	for i, w := range want {
		r := resp.Results[i]
		if r.StatusCode != w.status {
			t.Errorf("path %d: %v, want %v", i, r.StatusCode, w.status)
			continue
		}
		if w.target != nil && (len(r.Targets) != 1 || r.Targets[0].TargetID.NodeID.String() != w.target.String()) {
			t.Errorf("path %d: targets %v, want %v", i, r.Targets, w.target)
		}
	}
}

// TestTranslateBrowsePathsIntoConditions: a browse path reaches every node
// Browse shows, the alarm conditions under an instance (HasCondition,
// HasComponent) and the site folder, their fields and the fields'
// properties, and leads from the Server object to an instance folder by
// HasNotifier and from a condition's field back up to its condition.
func TestTranslateBrowsePathsIntoConditions(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	ts.SetConditions([]Condition{pumpAlarm(2, true, false), {ID: "gw-1", Source: "Boiler", Name: "Trip", Severity: 800, Active: true, Seq: 1}})
	c := connect(t, ts.Endpoint())
	site := ts.ns.idx
	step := func(ns uint16, name string, ref uint32, subtypes bool) *ua.RelativePathElement {
		return &ua.RelativePathElement{ReferenceTypeID: ua.NewNumericNodeID(0, ref), IncludeSubtypes: subtypes, TargetName: &ua.QualifiedName{NamespaceIndex: ns, Name: name}}
	}
	path := func(start *ua.NodeID, steps ...*ua.RelativePathElement) *ua.BrowsePath {
		return &ua.BrowsePath{StartingNode: start, RelativePath: &ua.RelativePath{Elements: steps}}
	}
	objects := ua.NewNumericNodeID(0, id.ObjectsFolder)
	for _, tt := range []struct {
		name string
		path *ua.BrowsePath
		want *ua.NodeID
	}{
		{"instance's condition by HasCondition", path(ts.ns.folderID("Pump1"), step(site, "P1-HI", id.HasCondition, false)), ts.ns.conditionID("P1-HI")},
		{"from Objects to a condition's ActiveState/Id", path(objects, step(site, ts.ns.siteName, id.HierarchicalReferences, true),
			step(site, "Pump1", id.HierarchicalReferences, true), step(site, "P1-HI", id.HierarchicalReferences, true),
			step(0, "ActiveState", id.HasComponent, false), step(0, "Id", id.HasProperty, false)), ts.fieldID("P1-HI", "ActiveState/Id")},
		{"site folder's condition", path(ts.ns.rootID(), step(site, "gw-1", id.HasComponent, false), step(0, "Severity", id.HasProperty, false)), ts.fieldID("gw-1", "Severity")},
		{"Server's notifier", path(ua.NewNumericNodeID(0, id.Server), step(site, "Pump1", id.HasNotifier, false)), ts.ns.folderID("Pump1")},
		{"up from a field", path(ts.fieldID("P1-HI", "Severity"), &ua.RelativePathElement{ReferenceTypeID: ua.NewNumericNodeID(0, id.HasProperty),
			IsInverse: true, TargetName: &ua.QualifiedName{NamespaceIndex: site, Name: "P1-HI"}}), ts.ns.conditionID("P1-HI")},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		resp, err := send[*ua.TranslateBrowsePathsToNodeIDsResponse](ctx, c, &ua.TranslateBrowsePathsToNodeIDsRequest{BrowsePaths: []*ua.BrowsePath{tt.path}})
		cancel()
		if err != nil || len(resp.Results) != 1 {
			t.Fatalf("%s: %v %+v", tt.name, err, resp)
		}
		r := resp.Results[0]
		if r.StatusCode != ua.StatusOK || len(r.Targets) != 1 || r.Targets[0].TargetID.NodeID.String() != tt.want.String() {
			t.Errorf("%s: %v %v, want %v", tt.name, r.StatusCode, r.Targets, tt.want)
		}
	}
}

// A Read gives the timestamps the client asked for, and refuses a
// TimestampsToReturn that is none of the four.
func TestReadTimestampsToReturn(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	c := connect(t, ts.Endpoint())
	src := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	if err := ts.TagUpdate("Pump1", "Speed", 3.5, ua.StatusOK, src); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, tt := range []struct {
		which          ua.TimestampsToReturn
		source, server bool
	}{{ua.TimestampsToReturnBoth, true, true}, {ua.TimestampsToReturnSource, true, false}, {ua.TimestampsToReturnServer, false, true}, {ua.TimestampsToReturnNeither, false, false}} {
		resp, err := c.Read(ctx, &ua.ReadRequest{TimestampsToReturn: tt.which, NodesToRead: []*ua.ReadValueID{{NodeID: ts.NodeID("Pump1", "Speed"), AttributeID: ua.AttributeIDValue}}})
		if err != nil {
			t.Fatal(err)
		}
		dv := resp.Results[0]
		if gotSrc, gotSrv := !dv.SourceTimestamp.IsZero(), !dv.ServerTimestamp.IsZero(); gotSrc != tt.source || gotSrv != tt.server || (tt.source && !dv.SourceTimestamp.Equal(src)) {
			t.Errorf("TimestampsToReturn %v: source %v server %v, want %v %v", tt.which, dv.SourceTimestamp, dv.ServerTimestamp, tt.source, tt.server)
		}
	}
	if _, err := c.Read(ctx, &ua.ReadRequest{TimestampsToReturn: 7, NodesToRead: []*ua.ReadValueID{{NodeID: serviceLevelID, AttributeID: ua.AttributeIDValue}}}); err == nil {
		t.Error("a Read with TimestampsToReturn 7 was served")
	}
}
