package opcua

import (
	"time"

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

	// Optional parts scadad does not serve: role management (Part 18),
	// history (Part 11), sampling-interval diagnostics, the namespace
	// metadata's role and access defaults, and the objects OPC UA 1.05
	// adds under Server for other parts (Part 12 ServerConfiguration,
	// Part 14 PublishSubscribe and its DataSetClasses, Dictionaries,
	// Resources), which the library imports without values and with
	// methods no Call would serve.
	id.Server_ServerCapabilities_RoleSet:                         true,
	id.HistoryServerCapabilities:                                 true,
	id.Server_ServerDiagnostics_SamplingIntervalDiagnosticsArray: true,
	id.OPCUANamespaceMetadata_DefaultRolePermissions:             true,
	id.OPCUANamespaceMetadata_DefaultUserRolePermissions:         true,
	id.OPCUANamespaceMetadata_DefaultAccessRestrictions:          true,
	id.ServerConfiguration:                                       true,
	id.PublishSubscribe:                                          true,
	id.DataSetClasses:                                            true,
	id.Dictionaries:                                              true,
	id.Resources:                                                 true,
}

// Namespace 0 as the library's nodeset (Opc.Ua.NodeSet2.xml) has it:
// its URI, version and publication date.
const (
	ua0URI     = "http://opcfoundation.org/UA/"
	ns0Version = "1.05.02"
	ns0Year    = 2022
	ns0Month   = time.November
	ns0Day     = 1
)

// diagnosticsSummary is ServerDiagnosticsSummary: the current sessions
// and subscriptions; the counts diagnostics would collect are 0
// (EnabledFlag is false).
func (s *Server) diagnosticsSummary() *ua.ServerDiagnosticsSummaryDataType {
	return &ua.ServerDiagnosticsSummaryDataType{
		CurrentSessionCount:      uint32(s.sessions.count()),
		CurrentSubscriptionCount: uint32(s.subs.count()),
	}
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
	sumVar := func(node uint32, name string, count func(*ua.ServerDiagnosticsSummaryDataType) uint32) serverVar {
		return serverVar{node, name, id.UInt32, -1, bdv, id.Server_ServerDiagnostics_ServerDiagnosticsSummary, comp,
			func() *ua.DataValue { return now(count(s.diagnosticsSummary())) }}
	}
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

		// ServerDiagnostics (Part 5, 6.3.3): scadad collects no
		// diagnostics (EnabledFlag false, read-only); the summary says
		// what the server knows anyway, the current sessions and
		// subscriptions, and 0 for the counts it does not keep; the
		// per-subscription and per-session arrays are empty.
		{id.Server_ServerDiagnostics_EnabledFlag, "EnabledFlag", id.Boolean, -1, pt, id.Server_ServerDiagnostics, prop,
			func() *ua.DataValue { return now(false) }},
		{id.Server_ServerDiagnostics_ServerDiagnosticsSummary, "ServerDiagnosticsSummary", id.ServerDiagnosticsSummaryDataType, -1,
			id.ServerDiagnosticsSummaryType, id.Server_ServerDiagnostics, comp,
			func() *ua.DataValue { return now(ua.NewExtensionObject(s.diagnosticsSummary())) }},
		{id.Server_ServerDiagnostics_SubscriptionDiagnosticsArray, "SubscriptionDiagnosticsArray", id.SubscriptionDiagnosticsDataType, 1,
			id.SubscriptionDiagnosticsArrayType, id.Server_ServerDiagnostics, comp,
			func() *ua.DataValue { return now([]*ua.ExtensionObject{}) }},
		{id.Server_ServerDiagnostics_SessionsDiagnosticsSummary_SessionDiagnosticsArray, "SessionDiagnosticsArray", id.SessionDiagnosticsDataType, 1,
			id.SessionDiagnosticsArrayType, id.Server_ServerDiagnostics_SessionsDiagnosticsSummary, comp,
			func() *ua.DataValue { return now([]*ua.ExtensionObject{}) }},
		{id.Server_ServerDiagnostics_SessionsDiagnosticsSummary_SessionSecurityDiagnosticsArray, "SessionSecurityDiagnosticsArray", id.SessionSecurityDiagnosticsDataType, 1,
			id.SessionSecurityDiagnosticsArrayType, id.Server_ServerDiagnostics_SessionsDiagnosticsSummary, comp,
			func() *ua.DataValue { return now([]*ua.ExtensionObject{}) }},

		// Namespaces (Part 5, 6.3.13): the metadata of namespace 0 as the
		// library's nodeset has it (1.05.02 of 2022-11-01; the library
		// names the object "0:http://opcfoundation.org/UA/"). Its node
		// ids are numeric; scadad serves a subset of it.
		{id.OPCUANamespaceMetadata_NamespaceURI, "NamespaceUri", id.String, -1, pt, id.OPCUANamespaceMetadata, prop,
			func() *ua.DataValue { return now(ua0URI) }},
		{id.OPCUANamespaceMetadata_NamespaceVersion, "NamespaceVersion", id.String, -1, pt, id.OPCUANamespaceMetadata, prop,
			func() *ua.DataValue { return now(ns0Version) }},
		{id.OPCUANamespaceMetadata_NamespacePublicationDate, "NamespacePublicationDate", id.DateTime, -1, pt, id.OPCUANamespaceMetadata, prop,
			func() *ua.DataValue { return now(time.Date(ns0Year, ns0Month, ns0Day, 0, 0, 0, 0, time.UTC)) }},
		{id.OPCUANamespaceMetadata_IsNamespaceSubset, "IsNamespaceSubset", id.Boolean, -1, pt, id.OPCUANamespaceMetadata, prop,
			func() *ua.DataValue { return now(true) }},
		{id.OPCUANamespaceMetadata_StaticNodeIDTypes, "StaticNodeIdTypes", id.IDType, 1, pt, id.OPCUANamespaceMetadata, prop,
			func() *ua.DataValue { return now([]int32{int32(ua.IDTypeNumeric)}) }},
		{id.OPCUANamespaceMetadata_StaticNumericNodeIDRange, "StaticNumericNodeIdRange", id.NumericRange, 1, pt, id.OPCUANamespaceMetadata, prop,
			func() *ua.DataValue { return now([]string{}) }},
		{id.OPCUANamespaceMetadata_StaticStringNodeIDPattern, "StaticStringNodeIdPattern", id.String, -1, pt, id.OPCUANamespaceMetadata, prop,
			func() *ua.DataValue { return now("") }},

		// Each of the summary's counts is a variable too (Part 5, 7.8).
		sumVar(id.Server_ServerDiagnostics_ServerDiagnosticsSummary_ServerViewCount, "ServerViewCount", func(d *ua.ServerDiagnosticsSummaryDataType) uint32 { return d.ServerViewCount }),
		sumVar(id.Server_ServerDiagnostics_ServerDiagnosticsSummary_CurrentSessionCount, "CurrentSessionCount", func(d *ua.ServerDiagnosticsSummaryDataType) uint32 { return d.CurrentSessionCount }),
		sumVar(id.Server_ServerDiagnostics_ServerDiagnosticsSummary_CumulatedSessionCount, "CumulatedSessionCount", func(d *ua.ServerDiagnosticsSummaryDataType) uint32 { return d.CumulatedSessionCount }),
		sumVar(id.Server_ServerDiagnostics_ServerDiagnosticsSummary_SecurityRejectedSessionCount, "SecurityRejectedSessionCount", func(d *ua.ServerDiagnosticsSummaryDataType) uint32 { return d.SecurityRejectedSessionCount }),
		sumVar(id.Server_ServerDiagnostics_ServerDiagnosticsSummary_RejectedSessionCount, "RejectedSessionCount", func(d *ua.ServerDiagnosticsSummaryDataType) uint32 { return d.RejectedSessionCount }),
		sumVar(id.Server_ServerDiagnostics_ServerDiagnosticsSummary_SessionTimeoutCount, "SessionTimeoutCount", func(d *ua.ServerDiagnosticsSummaryDataType) uint32 { return d.SessionTimeoutCount }),
		sumVar(id.Server_ServerDiagnostics_ServerDiagnosticsSummary_SessionAbortCount, "SessionAbortCount", func(d *ua.ServerDiagnosticsSummaryDataType) uint32 { return d.SessionAbortCount }),
		sumVar(id.Server_ServerDiagnostics_ServerDiagnosticsSummary_PublishingIntervalCount, "PublishingIntervalCount", func(d *ua.ServerDiagnosticsSummaryDataType) uint32 { return d.PublishingIntervalCount }),
		sumVar(id.Server_ServerDiagnostics_ServerDiagnosticsSummary_CurrentSubscriptionCount, "CurrentSubscriptionCount", func(d *ua.ServerDiagnosticsSummaryDataType) uint32 { return d.CurrentSubscriptionCount }),
		sumVar(id.Server_ServerDiagnostics_ServerDiagnosticsSummary_CumulatedSubscriptionCount, "CumulatedSubscriptionCount", func(d *ua.ServerDiagnosticsSummaryDataType) uint32 { return d.CumulatedSubscriptionCount }),
		sumVar(id.Server_ServerDiagnostics_ServerDiagnosticsSummary_SecurityRejectedRequestsCount, "SecurityRejectedRequestsCount", func(d *ua.ServerDiagnosticsSummaryDataType) uint32 { return d.SecurityRejectedRequestsCount }),
		sumVar(id.Server_ServerDiagnostics_ServerDiagnosticsSummary_RejectedRequestsCount, "RejectedRequestsCount", func(d *ua.ServerDiagnosticsSummaryDataType) uint32 { return d.RejectedRequestsCount }),

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
		{id.Server_ServerCapabilities_MaxMonitoredItemsQueueSize, "MaxMonitoredItemsQueueSize", id.UInt32, -1, pt, id.Server_ServerCapabilities, prop, u32(maxEventQueue)},
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
	typeName := func(t uint32) string {
		if n := n0.Node(ua.NewNumericNodeID(0, t)); n != nil {
			return n.BrowseName().Name
		}
		return ""
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
	// The library names namespace 0's metadata object
	// "0:http://opcfoundation.org/UA/": the nodeset's namespace prefix
	// taken for part of the name.
	if meta := n0.Node(ua.NewNumericNodeID(0, id.OPCUANamespaceMetadata)); meta != nil {
		meta.SetBrowseName(ua0URI)
		meta.SetDisplayName(ua0URI, "")
	}
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
