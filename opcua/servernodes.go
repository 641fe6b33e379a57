package opcua

import (
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/server"
	"github.com/gopcua/opcua/ua"
)

// The Server object as a strict client reads it (Part 5, 6.3.1 ServerType,
// 6.3.2 ServerCapabilitiesType, 6.3.3 ServerStatusType). The library's
// import gets it wrong (WORKAROUNDS.md row 21): ServerStatus's State is
// named "ServerStatus" and ManufacturerName "ProductName"; the BuildInfo
// variables hang off ServerStatus instead of BuildInfo; no variable there
// has a DataType or TypeDefinition, the ServerCapabilities properties have
// no values; the Server object lists every reference twice (ServerStatus a
// third time, as "Status") and offers methods no Call would serve.

// serverVar is a namespace-0 variable scadad serves in place of the
// library's.
type serverVar struct {
	node      uint32
	name      string
	dataType  uint32
	rank      int32
	typeDef   uint32 // PropertyType, BaseDataVariableType or a specific type
	parent    uint32
	parentRef uint32 // HasProperty or HasComponent
	value     func() *ua.DataValue
}

// Optional children of the Server object and its capabilities that the
// library lists without a value and scadad does not serve: methods (Call
// is not served), and limits of services scadad answers
// BadServiceUnsupported or does not bound.
var unservedServerChildren = map[uint32]bool{
	id.Server_GetMonitoredItems:        true,
	id.Server_ResendData:               true,
	id.Server_SetSubscriptionDurable:   true,
	id.Server_RequestServerStateChange: true,
	id.Server_EstimatedReturnTime:      true,
	id.Server_LocalTime:                true,
	id.Server_URIsVersion:              true,

	id.Server_ServerCapabilities_MaxMonitoredItems:         true,
	id.Server_ServerCapabilities_MaxSelectClauseParameters: true,
	id.Server_ServerCapabilities_MaxWhereClauseParameters:  true,
	id.Server_ServerCapabilities_ConformanceUnits:          true,

	id.Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryReadData:     true,
	id.Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryReadEvents:   true,
	id.Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryUpdateData:   true,
	id.Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryUpdateEvents: true,
	id.Server_ServerCapabilities_OperationLimits_MaxNodesPerMethodCall:          true,
	id.Server_ServerCapabilities_OperationLimits_MaxNodesPerNodeManagement:      true,
	id.Server_ServerCapabilities_OperationLimits_MaxNodesPerRegisterNodes:       true,
}

// serverProfiles is what ServerProfileArray claims: the Micro Embedded
// Device 2017 Server Profile (Core 2017 Server Facet, Embedded DataChange
// Subscription, UA-TCP UA-SC UA-Binary), which scadad serves whole; the
// facets beyond it are listed in docs/opcua.md.
var serverProfiles = []string{"http://opcfoundation.org/UA-Profile/Server/MicroEmbeddedDevice2017"}

// installServerObject serves ServerStatus and its children, the
// ServerCapabilities values, and the Server object's references, each
// once. It runs before Start, after installRedundancyNodes.
func (s *Server) installServerObject(srv *server.Server) error {
	n0, err := ns0(srv)
	if err != nil {
		return err
	}
	status := func() *ua.ServerStatusDataType { return srv.Status() }
	build := func() *ua.BuildInfo {
		if b := status().BuildInfo; b != nil {
			return b
		}
		return &ua.BuildInfo{}
	}
	now := func(v any) *ua.DataValue { return plainValue(v, s.clock.Now()) }
	u32 := func(n int) func() *ua.DataValue { return func() *ua.DataValue { return now(uint32(max(n, 0))) } }
	u16 := func(n int) func() *ua.DataValue { return func() *ua.DataValue { return now(uint16(n)) } }
	const (
		comp = id.HasComponent
		prop = id.HasProperty
		bdv  = id.BaseDataVariableType
		pt   = id.PropertyType
	)
	vars := []serverVar{
		{id.Server_ServerStatus, "ServerStatus", id.ServerStatusDataType, -1, id.ServerStatusType, id.Server, comp,
			func() *ua.DataValue { return now(ua.NewExtensionObject(status())) }},
		{id.Server_ServerStatus_StartTime, "StartTime", id.UtcTime, -1, bdv, id.Server_ServerStatus, comp,
			func() *ua.DataValue { return now(status().StartTime) }},
		{id.Server_ServerStatus_CurrentTime, "CurrentTime", id.UtcTime, -1, bdv, id.Server_ServerStatus, comp,
			func() *ua.DataValue { return now(s.clock.Now().UTC()) }},
		{id.Server_ServerStatus_State, "State", id.ServerState, -1, bdv, id.Server_ServerStatus, comp,
			func() *ua.DataValue { return now(int32(status().State)) }},
		{id.Server_ServerStatus_BuildInfo, "BuildInfo", id.BuildInfo, -1, id.BuildInfoType, id.Server_ServerStatus, comp,
			func() *ua.DataValue { return now(ua.NewExtensionObject(build())) }},
		{id.Server_ServerStatus_SecondsTillShutdown, "SecondsTillShutdown", id.UInt32, -1, bdv, id.Server_ServerStatus, comp,
			func() *ua.DataValue { return now(status().SecondsTillShutdown) }},
		{id.Server_ServerStatus_ShutdownReason, "ShutdownReason", id.LocalizedText, -1, bdv, id.Server_ServerStatus, comp,
			func() *ua.DataValue {
				if r := status().ShutdownReason; r != nil {
					return now(r)
				}
				return now(localized(""))
			}},
		{id.Server_ServerStatus_BuildInfo_ProductURI, "ProductUri", id.String, -1, bdv, id.Server_ServerStatus_BuildInfo, comp,
			func() *ua.DataValue { return now(build().ProductURI) }},
		{id.Server_ServerStatus_BuildInfo_ManufacturerName, "ManufacturerName", id.String, -1, bdv, id.Server_ServerStatus_BuildInfo, comp,
			func() *ua.DataValue { return now(build().ManufacturerName) }},
		{id.Server_ServerStatus_BuildInfo_ProductName, "ProductName", id.String, -1, bdv, id.Server_ServerStatus_BuildInfo, comp,
			func() *ua.DataValue { return now(build().ProductName) }},
		{id.Server_ServerStatus_BuildInfo_SoftwareVersion, "SoftwareVersion", id.String, -1, bdv, id.Server_ServerStatus_BuildInfo, comp,
			func() *ua.DataValue { return now(build().SoftwareVersion) }},
		{id.Server_ServerStatus_BuildInfo_BuildNumber, "BuildNumber", id.String, -1, bdv, id.Server_ServerStatus_BuildInfo, comp,
			func() *ua.DataValue { return now(build().BuildNumber) }},
		{id.Server_ServerStatus_BuildInfo_BuildDate, "BuildDate", id.UtcTime, -1, bdv, id.Server_ServerStatus_BuildInfo, comp,
			func() *ua.DataValue { return now(build().BuildDate) }},
		{id.Server_Auditing, "Auditing", id.Boolean, -1, pt, id.Server, prop,
			func() *ua.DataValue { return now(false) }},

		// What scadad enforces: 0 says "no limit" where the spec gives
		// it that meaning (Query and History are not served, so they
		// hold no continuation points).
		{id.Server_ServerCapabilities_ServerProfileArray, "ServerProfileArray", id.String, 1, pt, id.Server_ServerCapabilities, prop,
			func() *ua.DataValue { return now(serverProfiles) }},
		{id.Server_ServerCapabilities_LocaleIDArray, "LocaleIdArray", id.LocaleID, 1, pt, id.Server_ServerCapabilities, prop,
			func() *ua.DataValue { return now([]string{}) }},
		{id.Server_ServerCapabilities_MinSupportedSampleRate, "MinSupportedSampleRate", id.Duration, -1, pt, id.Server_ServerCapabilities, prop,
			func() *ua.DataValue { return now(float64(0)) }}, // values are reported as they arrive
		{id.Server_ServerCapabilities_MaxBrowseContinuationPoints, "MaxBrowseContinuationPoints", id.UInt16, -1, pt, id.Server_ServerCapabilities, prop, u16(maxBrowseContinuationPoints)},
		{id.Server_ServerCapabilities_MaxQueryContinuationPoints, "MaxQueryContinuationPoints", id.UInt16, -1, pt, id.Server_ServerCapabilities, prop, u16(0)},
		{id.Server_ServerCapabilities_MaxHistoryContinuationPoints, "MaxHistoryContinuationPoints", id.UInt16, -1, pt, id.Server_ServerCapabilities, prop, u16(0)},
		{id.Server_ServerCapabilities_SoftwareCertificates, "SoftwareCertificates", id.SignedSoftwareCertificate, 1, pt, id.Server_ServerCapabilities, prop,
			func() *ua.DataValue { return now([]*ua.ExtensionObject{}) }},
		{id.Server_ServerCapabilities_MaxArrayLength, "MaxArrayLength", id.UInt32, -1, pt, id.Server_ServerCapabilities, prop, u32(ua.MaxVariantArrayLength)},
		{id.Server_ServerCapabilities_MaxStringLength, "MaxStringLength", id.UInt32, -1, pt, id.Server_ServerCapabilities, prop, u32(s.cfg.MaxWriteStringLength)},
		{id.Server_ServerCapabilities_MaxByteStringLength, "MaxByteStringLength", id.UInt32, -1, pt, id.Server_ServerCapabilities, prop, u32(maxClassifiedLen)},
		{id.Server_ServerCapabilities_MaxSessions, "MaxSessions", id.UInt32, -1, pt, id.Server_ServerCapabilities, prop, u32(s.cfg.MaxSessions)},
		{id.Server_ServerCapabilities_MaxSubscriptions, "MaxSubscriptions", id.UInt32, -1, pt, id.Server_ServerCapabilities, prop, u32(maxSubscriptions)},
		{id.Server_ServerCapabilities_MaxSubscriptionsPerSession, "MaxSubscriptionsPerSession", id.UInt32, -1, pt, id.Server_ServerCapabilities, prop, u32(maxSubscriptionsPerSession)},
		{id.Server_ServerCapabilities_MaxMonitoredItemsPerSubscription, "MaxMonitoredItemsPerSubscription", id.UInt32, -1, pt, id.Server_ServerCapabilities, prop, u32(maxItemsPerSubscription)},
		{id.Server_ServerCapabilities_MaxMonitoredItemsQueueSize, "MaxMonitoredItemsQueueSize", id.UInt32, -1, pt, id.Server_ServerCapabilities, prop, u32(1)},
	}
	owned := make(map[uint32]bool, len(vars))
	children := make(map[uint32][]serverVar)
	for _, v := range vars {
		owned[v.node] = true
		children[v.parent] = append(children[v.parent], v)
	}
	ref := func(refType uint32, forward bool, target uint32, name string, class ua.NodeClass) *ua.ReferenceDescription {
		return &ua.ReferenceDescription{
			ReferenceTypeID: ua.NewNumericNodeID(0, refType), IsForward: forward,
			NodeID: ua.NewNumericExpandedNodeID(0, target), BrowseName: &ua.QualifiedName{Name: name},
			DisplayName: localized(name), NodeClass: class, TypeDefinition: ua.NewTwoByteExpandedNodeID(0),
		}
	}
	for _, v := range vars {
		refs := []*ua.ReferenceDescription{
			ref(id.HasTypeDefinition, true, v.typeDef, typeName(v.typeDef), ua.NodeClassVariableType),
			ref(v.parentRef, false, v.parent, "", ua.NodeClassObject),
		}
		for _, c := range children[v.node] {
			refs = append(refs, ref(c.parentRef, true, c.node, c.name, ua.NodeClassVariable))
		}
		n0.AddNode(server.NewNode(ua.NewNumericNodeID(0, v.node), readOnlyVariable(v.name, v.dataType, v.rank), refs, v.value))
	}
	// The objects above them: each reference once, named as its target
	// is, none to what is not served, and one to every variable above.
	for _, obj := range []uint32{id.Server, id.Server_ServerCapabilities, id.Server_ServerCapabilities_OperationLimits} {
		if err := s.relinkObject(n0, obj, children[obj], owned); err != nil {
			return err
		}
	}
	return nil
}

// readOnlyVariable is the attributes of a namespace-0 variable scadad
// serves: read-only, no history, sampled as it changes.
func readOnlyVariable(name string, dataType uint32, rank int32) server.Attributes {
	return server.Attributes{
		ua.AttributeIDNodeClass:               server.DataValueFromValue(uint32(ua.NodeClassVariable)),
		ua.AttributeIDBrowseName:              server.DataValueFromValue(&ua.QualifiedName{Name: name}),
		ua.AttributeIDDisplayName:             server.DataValueFromValue(localized(name)),
		ua.AttributeIDDescription:             server.DataValueFromValue(localized("")),
		ua.AttributeIDDataType:                server.DataValueFromValue(ua.NewNumericExpandedNodeID(0, dataType)),
		ua.AttributeIDValueRank:               server.DataValueFromValue(rank),
		ua.AttributeIDAccessLevel:             server.DataValueFromValue(accessRead),
		ua.AttributeIDUserAccessLevel:         server.DataValueFromValue(accessRead),
		ua.AttributeIDMinimumSamplingInterval: server.DataValueFromValue(float64(0)),
		ua.AttributeIDHistorizing:             server.DataValueFromValue(false),
		ua.AttributeIDWriteMask:               server.DataValueFromValue(uint32(0)),
		ua.AttributeIDUserWriteMask:           server.DataValueFromValue(uint32(0)),
	}
}

// typeName is the BrowseName of a variable type used above.
func typeName(t uint32) string {
	switch t {
	case id.PropertyType:
		return "PropertyType"
	case id.ServerStatusType:
		return "ServerStatusType"
	case id.BuildInfoType:
		return "BuildInfoType"
	}
	return "BaseDataVariableType"
}

// relinkObject rebuilds object obj of namespace 0 with its references
// deduplicated (by type, direction and target), renamed after their
// targets, without those to unserved children, and with one to each of
// children.
func (s *Server) relinkObject(n0 *server.NodeNameSpace, obj uint32, children []serverVar, owned map[uint32]bool) error {
	nid := ua.NewNumericNodeID(0, obj)
	old := n0.Node(nid)
	if old == nil {
		return nil // not in this nodeset: nothing to fix
	}
	res := n0.Browse(&ua.BrowseDescription{NodeID: nid, BrowseDirection: ua.BrowseDirectionBoth,
		ReferenceTypeID: ua.NewNumericNodeID(0, 0), IncludeSubtypes: true, ResultMask: uint32(ua.BrowseResultMaskAll)})
	type key struct {
		refType uint32
		forward bool
		target  string
	}
	seen := make(map[key]bool)
	var refs []*ua.ReferenceDescription
	add := func(r *ua.ReferenceDescription) {
		k := key{r.ReferenceTypeID.IntID(), r.IsForward, r.NodeID.NodeID.String()}
		if seen[k] {
			return
		}
		seen[k] = true
		if t := n0.Node(r.NodeID.NodeID); t != nil && r.NodeID.NodeID.Namespace() == 0 {
			if bn := t.BrowseName(); bn != nil {
				r.BrowseName, r.DisplayName = bn, localized(bn.Name)
			}
		}
		if r.TypeDefinition == nil {
			r.TypeDefinition = ua.NewTwoByteExpandedNodeID(0)
		}
		refs = append(refs, r)
	}
	for _, c := range children {
		add(&ua.ReferenceDescription{ReferenceTypeID: ua.NewNumericNodeID(0, c.parentRef), IsForward: true,
			NodeID: ua.NewNumericExpandedNodeID(0, c.node), BrowseName: &ua.QualifiedName{Name: c.name},
			DisplayName: localized(c.name), NodeClass: ua.NodeClassVariable, TypeDefinition: ua.NewTwoByteExpandedNodeID(0)})
	}
	for _, r := range res.References {
		target := r.NodeID.NodeID
		if target.Namespace() == 0 && r.IsForward && unservedServerChildren[target.IntID()] {
			continue
		}
		add(r)
	}
	attrs := server.Attributes{}
	for _, a := range []ua.AttributeID{ua.AttributeIDNodeClass, ua.AttributeIDBrowseName, ua.AttributeIDDisplayName,
		ua.AttributeIDDescription, ua.AttributeIDEventNotifier, ua.AttributeIDWriteMask, ua.AttributeIDUserWriteMask} {
		if v, err := old.Attribute(a); err == nil && v != nil {
			attrs[a] = v.Value
		}
	}
	n0.AddNode(server.NewNode(nid, attrs, refs, nil))
	return nil
}
