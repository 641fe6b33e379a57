package opcua

import (
	"context"
	"fmt"
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
		{id.Server_ServerCapabilities_MaxMonitoredItemsQueueSize, "MaxMonitoredItemsQueueSize", id.UInt32, id.PropertyType, id.Server_ServerCapabilities, id.HasProperty, uint32(1)},
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
				t.Errorf("i=%d offers method %s; Call is not served", obj, r.BrowseName.Name)
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
