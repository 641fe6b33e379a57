package opcua

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

// TestServerObjectConformance reads the Server object the way a strict
// client (or the OPC Foundation's test tool) checks it: ServerStatus, its
// State, BuildInfo and BuildInfo's children with the BrowseNames,
// DataTypes and TypeDefinitions of Part 5, each with a value of that
// type; ServerCapabilities with the limits scadad enforces; and the
// Server object, its capabilities and operation limits listing each
// reference once, named as its target is, to nodes that have values.
func TestServerObjectConformance(t *testing.T) {
	ts := startServer(t, activeState(), func(c *Config) {
		c.MaxSessions = 7
		c.MaxNodesPerRequest = 500
		c.Build = BuildInfo{SoftwareVersion: "v0.2.0", BuildNumber: "3f2a9c1", BuildDate: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	})
	c := connect(t, ts.Endpoint())
	for _, tc := range []struct {
		node              uint32
		name              string
		dataType, typeDef uint32
		parent, parentRef uint32
		want              any // a value, or a func checking it
	}{
		{id.Server_ServerStatus, "ServerStatus", id.ServerStatusDataType, id.ServerStatusType, id.Server, id.HasComponent, func(v any) bool {
			eo, ok := v.(*ua.ExtensionObject)
			if !ok || eo == nil {
				return false
			}
			st, _ := eo.Value.(*ua.ServerStatusDataType)
			return st != nil && st.State == ua.ServerStateRunning && st.BuildInfo != nil && st.BuildInfo.SoftwareVersion == "v0.2.0"
		}},
		{id.Server_ServerStatus_State, "State", id.ServerState, id.BaseDataVariableType, id.Server_ServerStatus, id.HasComponent, int32(ua.ServerStateRunning)},
		{id.Server_ServerStatus_StartTime, "StartTime", id.UtcTime, id.BaseDataVariableType, id.Server_ServerStatus, id.HasComponent, func(v any) bool {
			at, ok := v.(time.Time)
			return ok && time.Since(at) < time.Minute
		}},
		{id.Server_ServerStatus_CurrentTime, "CurrentTime", id.UtcTime, id.BaseDataVariableType, id.Server_ServerStatus, id.HasComponent, func(v any) bool {
			at, ok := v.(time.Time)
			return ok && time.Since(at) < time.Minute
		}},
		{id.Server_ServerStatus_BuildInfo, "BuildInfo", id.BuildInfo, id.BuildInfoType, id.Server_ServerStatus, id.HasComponent, func(v any) bool {
			eo, ok := v.(*ua.ExtensionObject)
			if !ok || eo == nil {
				return false
			}
			b, _ := eo.Value.(*ua.BuildInfo)
			return b != nil && b.ProductName == "scadad" && b.BuildNumber == "3f2a9c1"
		}},
		{id.Server_ServerStatus_SecondsTillShutdown, "SecondsTillShutdown", id.UInt32, id.BaseDataVariableType, id.Server_ServerStatus, id.HasComponent, uint32(0)},
		{id.Server_ServerStatus_BuildInfo_ProductName, "ProductName", id.String, id.BaseDataVariableType, id.Server_ServerStatus_BuildInfo, id.HasComponent, "scadad"},
		{id.Server_ServerStatus_BuildInfo_ManufacturerName, "ManufacturerName", id.String, id.BaseDataVariableType, id.Server_ServerStatus_BuildInfo, id.HasComponent, "scadad"},
		{id.Server_ServerStatus_BuildInfo_ProductURI, "ProductUri", id.String, id.BaseDataVariableType, id.Server_ServerStatus_BuildInfo, id.HasComponent, "urn:scadad"},
		{id.Server_ServerStatus_BuildInfo_SoftwareVersion, "SoftwareVersion", id.String, id.BaseDataVariableType, id.Server_ServerStatus_BuildInfo, id.HasComponent, "v0.2.0"},
		{id.Server_ServerStatus_BuildInfo_BuildNumber, "BuildNumber", id.String, id.BaseDataVariableType, id.Server_ServerStatus_BuildInfo, id.HasComponent, "3f2a9c1"},
		{id.Server_ServerStatus_BuildInfo_BuildDate, "BuildDate", id.UtcTime, id.BaseDataVariableType, id.Server_ServerStatus_BuildInfo, id.HasComponent, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)},
		{id.Server_Auditing, "Auditing", id.Boolean, id.PropertyType, id.Server, id.HasProperty, false},
		{id.Server_ServerCapabilities_MaxBrowseContinuationPoints, "MaxBrowseContinuationPoints", id.UInt16, id.PropertyType, id.Server_ServerCapabilities, id.HasProperty, uint16(maxBrowseContinuationPoints)},
		{id.Server_ServerCapabilities_ServerProfileArray, "ServerProfileArray", id.String, id.PropertyType, id.Server_ServerCapabilities, id.HasProperty, func(v any) bool {
			p, ok := v.([]string)
			return ok && len(p) == 1 && p[0] == "http://opcfoundation.org/UA-Profile/Server/MicroEmbeddedDevice2017"
		}},
		{id.Server_ServerCapabilities_MinSupportedSampleRate, "MinSupportedSampleRate", id.Duration, id.PropertyType, id.Server_ServerCapabilities, id.HasProperty, float64(0)},
		{id.Server_ServerCapabilities_MaxArrayLength, "MaxArrayLength", id.UInt32, id.PropertyType, id.Server_ServerCapabilities, id.HasProperty, uint32(65535)},
		{id.Server_ServerCapabilities_MaxStringLength, "MaxStringLength", id.UInt32, id.PropertyType, id.Server_ServerCapabilities, id.HasProperty, uint32(64 << 10)},
		{id.Server_ServerCapabilities_MaxSessions, "MaxSessions", id.UInt32, id.PropertyType, id.Server_ServerCapabilities, id.HasProperty, uint32(7)},
		{id.Server_ServerCapabilities_MaxSubscriptionsPerSession, "MaxSubscriptionsPerSession", id.UInt32, id.PropertyType, id.Server_ServerCapabilities, id.HasProperty, uint32(maxSubscriptionsPerSession)},
		{id.Server_ServerCapabilities_MaxMonitoredItemsQueueSize, "MaxMonitoredItemsQueueSize", id.UInt32, id.PropertyType, id.Server_ServerCapabilities, id.HasProperty, uint32(maxEventQueue)},
		{id.Server_ServerCapabilities_OperationLimits_MaxNodesPerRead, "MaxNodesPerRead", id.UInt32, id.PropertyType, id.Server_ServerCapabilities_OperationLimits, id.HasProperty, uint32(500)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nid := ua.NewNumericNodeID(0, tc.node)
			if bn := readValue(t, c, nid, ua.AttributeIDBrowseName).Value.Value(); fmt.Sprint(bn) != fmt.Sprint(&ua.QualifiedName{Name: tc.name}) {
				t.Errorf("BrowseName %v, want %s", bn, tc.name)
			}
			if dt, ok := readValue(t, c, nid, ua.AttributeIDDataType).Value.Value().(*ua.NodeID); !ok || dt.IntID() != tc.dataType || dt.Namespace() != 0 {
				t.Errorf("DataType %v, want i=%d", dt, tc.dataType)
			}
			dv := readValue(t, c, nid, ua.AttributeIDValue)
			if dv.Status != ua.StatusOK || dv.Value == nil {
				t.Fatalf("value: %v", dv.Status)
			}
			if check, ok := tc.want.(func(any) bool); ok {
				if !check(dv.Value.Value()) {
					t.Errorf("value %#v", dv.Value.Value())
				}
			} else if fmt.Sprint(dv.Value.Value()) != fmt.Sprint(tc.want) {
				t.Errorf("value %v (%T), want %v (%T)", dv.Value.Value(), dv.Value.Value(), tc.want, tc.want)
			}
			refs := browseAll(t, c, nid)
			var typeDef, parent bool
			for _, r := range refs {
				switch {
				case r.ReferenceTypeID.IntID() == id.HasTypeDefinition && r.IsForward:
					typeDef = r.NodeID.NodeID.IntID() == tc.typeDef
				case r.ReferenceTypeID.IntID() == tc.parentRef && !r.IsForward:
					parent = r.NodeID.NodeID.IntID() == tc.parent
				}
			}
			if !typeDef || !parent {
				t.Errorf("references %s: want a TypeDefinition i=%d and a parent i=%d", describe(refs), tc.typeDef, tc.parent)
			}
			if !hasForwardRef(browseAll(t, c, ua.NewNumericNodeID(0, tc.parent)), tc.parentRef, tc.node) {
				t.Errorf("parent i=%d does not reference i=%d", tc.parent, tc.node)
			}
		})
	}
	// Each reference once, named as its target, to a node with a value.
	for _, obj := range []uint32{id.Server, id.Server_ServerStatus, id.Server_ServerStatus_BuildInfo, id.Server_ServerCapabilities, id.Server_ServerCapabilities_OperationLimits} {
		seen := map[string]bool{}
		for _, r := range browseAll(t, c, ua.NewNumericNodeID(0, obj)) {
			k := fmt.Sprintf("%v/%v/%v", r.ReferenceTypeID, r.IsForward, r.NodeID.NodeID)
			if seen[k] {
				t.Errorf("i=%d lists %s (%s) twice", obj, k, r.BrowseName.Name)
			}
			seen[k] = true
			if !r.IsForward || r.NodeID.NodeID.Namespace() != 0 {
				continue
			}
			target := r.NodeID.NodeID
			if bn, ok := readValue(t, c, target, ua.AttributeIDBrowseName).Value.Value().(*ua.QualifiedName); !ok || bn.Name != r.BrowseName.Name {
				t.Errorf("i=%d names its reference to %v %q; the target's BrowseName is %v", obj, target, r.BrowseName.Name, bn)
			}
			if r.NodeClass == ua.NodeClassMethod {
				t.Errorf("i=%d offers method %s; Call serves none of the Server object's", obj, r.BrowseName.Name)
			}
			if r.NodeClass == ua.NodeClassVariable {
				if dv := readValue(t, c, target, ua.AttributeIDValue); dv.Status != ua.StatusOK || dv.Value == nil || dv.Value.Value() == nil {
					t.Errorf("i=%d's %s (%v) has no value: %v", obj, r.BrowseName.Name, target, dv.Status)
				}
			}
		}
	}
}

func browseAll(t *testing.T, c *gopcua.Client, nid *ua.NodeID) []*ua.ReferenceDescription {
	t.Helper()
	res, err := c.Browse(context.Background(), &ua.BrowseRequest{NodesToBrowse: []*ua.BrowseDescription{{NodeID: nid,
		BrowseDirection: ua.BrowseDirectionBoth, ReferenceTypeID: ua.NewNumericNodeID(0, 0), IncludeSubtypes: true, ResultMask: uint32(ua.BrowseResultMaskAll)}}})
	if err != nil || len(res.Results) != 1 || res.Results[0].StatusCode != ua.StatusOK {
		t.Fatalf("browse %v: %v %+v", nid, err, res)
	}
	return res.Results[0].References
}

func hasForwardRef(refs []*ua.ReferenceDescription, refType, target uint32) bool {
	for _, r := range refs {
		if r.IsForward && r.ReferenceTypeID.IntID() == refType && r.NodeID.NodeID.Namespace() == 0 && r.NodeID.NodeID.IntID() == target {
			return true
		}
	}
	return false
}

func describe(refs []*ua.ReferenceDescription) string {
	var out []string
	for _, r := range refs {
		dir := ">"
		if !r.IsForward {
			dir = "<"
		}
		out = append(out, fmt.Sprintf("%v%s%v", r.ReferenceTypeID, dir, r.NodeID.NodeID))
	}
	return fmt.Sprint(out)
}

// TestServerSubtreeConformance walks everything under the Server object
// (i=2253) by its forward hierarchical references, as a strict client
// browsing it does, and checks each node the way Part 3 and Part 5 have
// it: each reference once, named and classed as its target is, with the
// target's TypeDefinition; every Object and Variable typed; every
// Variable with a DataType and a Good value of it; no Method (Call serves
// the condition methods alone, none under Server). The library imports
// ServerDiagnostics, Namespaces and the 1.05 objects (ServerConfiguration,
// PublishSubscribe, Resources…) without values or DataTypes, lists their
// references twice and names the namespace-0 metadata object
// "0:http://opcfoundation.org/UA/".
func TestServerSubtreeConformance(t *testing.T) {
	ts := startServer(t, activeState(), func(c *Config) { c.Build = BuildInfo{SoftwareVersion: "v9.8.7"} })
	c := connect(t, ts.Endpoint())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	forward := func(nid *ua.NodeID, refType uint32) []*ua.ReferenceDescription {
		t.Helper()
		res, err := c.Browse(ctx, &ua.BrowseRequest{NodesToBrowse: []*ua.BrowseDescription{{NodeID: nid, BrowseDirection: ua.BrowseDirectionForward,
			ReferenceTypeID: ua.NewNumericNodeID(0, refType), IncludeSubtypes: true, ResultMask: uint32(ua.BrowseResultMaskAll)}}})
		if err != nil || len(res.Results) != 1 || res.Results[0].StatusCode != ua.StatusOK {
			t.Fatalf("browse %v: %v %+v", nid, err, res)
		}
		return res.Results[0].References
	}
	read := func(nid *ua.NodeID, attrs ...ua.AttributeID) []*ua.DataValue {
		t.Helper()
		req := &ua.ReadRequest{TimestampsToReturn: ua.TimestampsToReturnNeither}
		for _, a := range attrs {
			req.NodesToRead = append(req.NodesToRead, &ua.ReadValueID{NodeID: nid, AttributeID: a})
		}
		resp, err := c.Read(ctx, req)
		if err != nil || len(resp.Results) != len(attrs) {
			t.Fatalf("read %v: %v", nid, err)
		}
		return resp.Results
	}
	// The Go type each built-in DataType's value decodes to.
	builtin := map[uint32]string{id.Boolean: "bool", id.Byte: "uint8", id.UInt16: "uint16", id.UInt32: "uint32", id.Int32: "int32",
		id.Double: "float64", id.Duration: "float64", id.String: "string", id.UtcTime: "time.Time", id.LocalizedText: "*ua.LocalizedText",
		id.LocaleID: "string", id.DateTime: "time.Time", id.IDType: "int32", id.NumericRange: "string"}
	seen := map[string]bool{}
	nodes := 0
	var walk func(nid *ua.NodeID, path string)
	walk = func(nid *ua.NodeID, path string) {
		if seen[nid.String()] {
			return
		}
		seen[nid.String()] = true
		nodes++
		refs := forward(nid, id.HierarchicalReferences)
		dup := map[string]bool{}
		for _, r := range refs {
			target := r.NodeID.NodeID
			where := path + "/" + r.BrowseName.Name
			k := fmt.Sprintf("%v/%v", r.ReferenceTypeID, target)
			if dup[k] {
				t.Errorf("%s: listed twice", where)
			}
			dup[k] = true
			// Of the other namespaces, only their metadata is the Server
			// object's (HasNotifier leads to the site's instances).
			if target.Namespace() != 0 && !strings.HasPrefix(where, "Server/Namespaces/") {
				continue
			}
			got := read(target, ua.AttributeIDBrowseName, ua.AttributeIDNodeClass, ua.AttributeIDDataType, ua.AttributeIDValueRank, ua.AttributeIDValue)
			if bn, ok := got[0].Value.Value().(*ua.QualifiedName); !ok || bn.Name != r.BrowseName.Name || bn.NamespaceIndex != r.BrowseName.NamespaceIndex {
				t.Errorf("%s (%v): the reference names it %v, its BrowseName is %v", where, target, r.BrowseName, got[0].Value.Value())
			}
			if class, _ := got[1].Value.Value().(int32); ua.NodeClass(class) != r.NodeClass {
				t.Errorf("%s: the reference says %v, its NodeClass is %v", where, r.NodeClass, got[1].Value.Value())
			}
			switch r.NodeClass {
			case ua.NodeClassMethod:
				t.Errorf("%s: a Method; Call serves none of the Server object's", where)
				continue
			case ua.NodeClassObject, ua.NodeClassVariable:
				defs := forward(target, id.HasTypeDefinition)
				if len(defs) != 1 || defs[0].NodeID.NodeID.IntID() == 0 {
					t.Errorf("%s: %d type definitions", where, len(defs))
				} else if r.TypeDefinition == nil || r.TypeDefinition.NodeID == nil || r.TypeDefinition.NodeID.String() != defs[0].NodeID.NodeID.String() {
					t.Errorf("%s: the reference's TypeDefinition is %v, the node's %v", where, r.TypeDefinition, defs[0].NodeID.NodeID)
				}
			}
			if r.NodeClass == ua.NodeClassVariable {
				dt, ok := got[2].Value.Value().(*ua.NodeID)
				if got[2].Status != ua.StatusOK || !ok || dt.IntID() == 0 {
					t.Errorf("%s: DataType %v (%v)", where, got[2].Value, got[2].Status)
				}
				rank, _ := got[3].Value.Value().(int32)
				if got[4].Status != ua.StatusOK || got[4].Value == nil || got[4].Value.Value() == nil {
					t.Errorf("%s: value %v", where, got[4].Status)
				} else if want, ok := builtin[dt.IntID()]; ok && dt.Namespace() == 0 {
					if rank >= 1 {
						want = "[]" + want
					}
					if have := fmt.Sprintf("%T", got[4].Value.Value()); have != want {
						t.Errorf("%s: a %s value, its DataType (%v, rank %d) wants %s", where, have, dt, rank, want)
					}
				}
			}
			walk(target, where)
		}
	}
	walk(ua.NewNumericNodeID(0, id.Server), "Server")
	t.Logf("%d nodes under Server", nodes)
	for _, must := range []uint32{id.Server_ServerDiagnostics_EnabledFlag, id.Server_ServerDiagnostics_ServerDiagnosticsSummary,
		id.Server_VendorServerInfo, id.Server_Namespaces, id.Server_ServerCapabilities_ModellingRules} {
		if !seen[ua.NewNumericNodeID(0, must).String()] {
			t.Errorf("i=%d, mandatory under Server (or served), not found browsing", must)
		}
	}
	for node, typ := range map[uint32]uint32{id.Server_ServerDiagnostics: id.ServerDiagnosticsType, id.Server_VendorServerInfo: id.VendorServerInfoType,
		id.Server_Namespaces: id.NamespacesType, id.OPCUANamespaceMetadata: id.NamespaceMetadataType,
		id.Server_ServerDiagnostics_SessionsDiagnosticsSummary: id.SessionsDiagnosticsSummaryType} {
		if defs := forward(ua.NewNumericNodeID(0, node), id.HasTypeDefinition); len(defs) != 1 || defs[0].NodeID.NodeID.IntID() != typ {
			t.Errorf("i=%d is typed %s, want i=%d", node, describe(defs), typ)
		}
	}
	if v := readValue(t, c, ua.NewNumericNodeID(0, id.Server_ServerDiagnostics_EnabledFlag), ua.AttributeIDValue); v.Value == nil || v.Value.Value() != false {
		t.Errorf("ServerDiagnostics.EnabledFlag = %v, want false: no diagnostics are collected", v.Value)
	}

	// Namespaces holds a NamespaceMetadataType object for every entry of
	// NamespaceArray, named by its URI, with the seven mandatory
	// properties of Part 5, 6.3.14, their DataTypes and its URI.
	uris, _ := readValue(t, c, ua.NewNumericNodeID(0, id.Server_NamespaceArray), ua.AttributeIDValue).Value.Value().([]string)
	if len(uris) != 3 || uris[1] != ts.ApplicationURI() || uris[2] != ts.ns.uri {
		t.Fatalf("NamespaceArray %v", uris)
	}
	metas := map[string]*ua.NodeID{}
	for _, r := range forward(ua.NewNumericNodeID(0, id.Server_Namespaces), id.HasComponent) {
		if r.TypeDefinition == nil || r.TypeDefinition.NodeID.IntID() != id.NamespaceMetadataType {
			t.Errorf("Namespaces/%v: typed %v", r.BrowseName, r.TypeDefinition)
		}
		metas[r.BrowseName.Name] = r.NodeID.NodeID
	}
	props := map[string]struct {
		dataType uint32
		rank     int32
	}{"NamespaceUri": {id.String, -1}, "NamespaceVersion": {id.String, -1}, "NamespacePublicationDate": {id.DateTime, -1},
		"IsNamespaceSubset": {id.Boolean, -1}, "StaticNodeIdTypes": {id.IDType, 1}, "StaticNumericNodeIdRange": {id.NumericRange, 1},
		"StaticStringNodeIdPattern": {id.String, -1}}
	for i, uri := range uris {
		meta := metas[uri]
		if meta == nil {
			t.Errorf("Namespaces has no metadata object for namespace %d (%s): %v", i, uri, metas)
			continue
		}
		found := map[string]*ua.NodeID{}
		for _, r := range forward(meta, id.HasProperty) {
			if r.BrowseName.NamespaceIndex != 0 {
				t.Errorf("%s/%v: BrowseName not of namespace 0", uri, r.BrowseName)
			}
			found[r.BrowseName.Name] = r.NodeID.NodeID
		}
		for name, want := range props {
			nid := found[name]
			if nid == nil {
				t.Errorf("%s: no %s property", uri, name)
				continue
			}
			got := read(nid, ua.AttributeIDDataType, ua.AttributeIDValueRank, ua.AttributeIDValue)
			if dt, _ := got[0].Value.Value().(*ua.NodeID); dt == nil || dt.IntID() != want.dataType || got[1].Value.Value() != want.rank {
				t.Errorf("%s/%s: DataType %v rank %v, want i=%d rank %d", uri, name, got[0].Value.Value(), got[1].Value.Value(), want.dataType, want.rank)
			}
			if name == "NamespaceUri" && got[2].Value.Value() != uri {
				t.Errorf("%s/NamespaceUri = %v", uri, got[2].Value.Value())
			}
		}
	}
	// The site's version is its model's, published when this server
	// applied it; namespace 1's is the build's; both served whole.
	before := time.Now().Add(-time.Second)
	if _, err := ts.ApplyModel(Model{Instances: testModel().Instances, Version: "42"}); err != nil {
		t.Fatal(err)
	}
	site := metas[uris[2]]
	prop := func(meta *ua.NodeID, node uint32) any {
		return readValue(t, c, ua.NewNumericNodeID(meta.Namespace(), node), ua.AttributeIDValue).Value.Value()
	}
	if v := prop(site, metaNamespaceVersionID); v != "42" {
		t.Errorf("site NamespaceVersion %v, want the model's 42", v)
	}
	if d, _ := prop(site, metaPublicationDateID).(time.Time); d.Before(before) {
		t.Errorf("site NamespacePublicationDate %v, before the model was applied (%v)", d, before)
	}
	if v := prop(metas[uris[1]], metaNamespaceVersionID); v != "v9.8.7" {
		t.Errorf("namespace 1's NamespaceVersion %v, want the build's v9.8.7", v)
	}
	for _, meta := range []*ua.NodeID{site, metas[uris[1]]} {
		if v := prop(meta, metaIsSubsetID); v != false {
			t.Errorf("%v IsNamespaceSubset %v, want false: the whole namespace is served", meta, v)
		}
	}
}
