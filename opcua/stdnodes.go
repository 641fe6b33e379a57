package opcua

import (
	"crypto/x509"
	"fmt"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/server"
	"github.com/gopcua/opcua/ua"
)

func applicationURIOf(certDER []byte) string {
	c, err := x509.ParseCertificate(certDER)
	if err != nil || len(c.URIs) == 0 {
		return ""
	}
	return c.URIs[0].String()
}

func ns0(srv *server.Server) (*server.NodeNameSpace, error) {
	ns, err := srv.Namespace(0)
	if err != nil {
		return nil, fmt.Errorf("opcua namespace 0: %w", err)
	}
	n0, ok := ns.(*server.NodeNameSpace)
	if !ok {
		return nil, fmt.Errorf("opcua namespace 0 is %T, not a node namespace", ns)
	}
	return n0, nil
}

// linkSiteFolder makes the site folder browsable from Objects. It runs once,
// before Start, because the library's nodes have no lock of their own.
func (s *Server) linkSiteFolder(srv *server.Server) error {
	n0, err := ns0(srv)
	if err != nil {
		return err
	}
	objects := n0.Node(ua.NewNumericNodeID(0, id.ObjectsFolder))
	if objects == nil {
		return fmt.Errorf("opcua namespace 0 has no Objects folder")
	}
	objects.AddRef(s.ns.Objects(), server.RefTypeIDOrganizes, true)
	return nil
}

// installRedundancyNodes replaces the standard redundancy variables, which
// the library imports without value, DataType or AccessLevel (and, without
// an AccessLevel, writable by anyone), with read-only variables whose values
// come from the server. The nodes are swapped in before Start; afterwards
// only their value functions run, and those read atomics.
func (s *Server) installRedundancyNodes(srv *server.Server) error {
	n0, err := ns0(srv)
	if err != nil {
		return err
	}
	uris := func() []string {
		out := []string{s.appURI}
		for _, p := range s.cfg.Peers {
			out = append(out, p.ApplicationURI)
		}
		return out
	}
	support := ua.RedundancySupportWarm
	if s.cfg.HotStandby {
		support = ua.RedundancySupportHot
	}
	vars := []struct {
		node     uint32
		name     string
		dataType uint32
		rank     int32
		parent   uint32
		value    func() *ua.DataValue
	}{
		{id.Server_ServiceLevel, "ServiceLevel", id.Byte, -1, id.Server, func() *ua.DataValue {
			s.mu.Lock()
			at := s.levelAt
			s.mu.Unlock()
			return &ua.DataValue{
				EncodingMask:    ua.DataValueValue | ua.DataValueSourceTimestamp | ua.DataValueServerTimestamp,
				Value:           ua.MustVariant(s.ServiceLevel()),
				SourceTimestamp: at,
				ServerTimestamp: s.clock.Now(),
			}
		}},
		{id.Server_ServerArray, "ServerArray", id.String, 1, id.Server, func() *ua.DataValue {
			return plainValue(uris(), s.clock.Now())
		}},
		{id.Server_ServerRedundancy_RedundancySupport, "RedundancySupport", id.RedundancySupport, -1, id.Server_ServerRedundancy, func() *ua.DataValue {
			return plainValue(int32(support), s.clock.Now())
		}},
		{id.Server_ServerRedundancy_ServerURIArray, "ServerUriArray", id.String, 1, id.Server_ServerRedundancy, func() *ua.DataValue {
			return plainValue(uris(), s.clock.Now())
		}},
	}
	// The operation limits say what checkCount enforces (the library
	// advertised MaxNodesPerRead 32, enforced nothing, and listed no other).
	limit := func() *ua.DataValue { return plainValue(uint32(s.cfg.MaxNodesPerRequest), s.clock.Now()) }
	for _, l := range []struct {
		node uint32
		name string
	}{
		{id.Server_ServerCapabilities_OperationLimits_MaxNodesPerRead, "MaxNodesPerRead"},
		{id.Server_ServerCapabilities_OperationLimits_MaxNodesPerWrite, "MaxNodesPerWrite"},
		{id.Server_ServerCapabilities_OperationLimits_MaxNodesPerBrowse, "MaxNodesPerBrowse"},
		{id.Server_ServerCapabilities_OperationLimits_MaxMonitoredItemsPerCall, "MaxMonitoredItemsPerCall"},
		{id.Server_ServerCapabilities_OperationLimits_MaxNodesPerTranslateBrowsePathsToNodeIDs, "MaxNodesPerTranslateBrowsePathsToNodeIds"},
	} {
		vars = append(vars, struct {
			node     uint32
			name     string
			dataType uint32
			rank     int32
			parent   uint32
			value    func() *ua.DataValue
		}{l.node, l.name, id.UInt32, -1, id.Server_ServerCapabilities_OperationLimits, limit})
	}
	for _, v := range vars {
		nid := ua.NewNumericNodeID(0, v.node)
		existed := n0.Node(nid) != nil
		name := &ua.QualifiedName{Name: v.name}
		node := server.NewNode(nid, server.Attributes{
			ua.AttributeIDNodeClass:               server.DataValueFromValue(uint32(ua.NodeClassVariable)),
			ua.AttributeIDBrowseName:              server.DataValueFromValue(name),
			ua.AttributeIDDisplayName:             server.DataValueFromValue(localized(v.name)),
			ua.AttributeIDDescription:             server.DataValueFromValue(localized("")),
			ua.AttributeIDDataType:                server.DataValueFromValue(ua.NewNumericExpandedNodeID(0, v.dataType)),
			ua.AttributeIDValueRank:               server.DataValueFromValue(v.rank),
			ua.AttributeIDAccessLevel:             server.DataValueFromValue(accessRead),
			ua.AttributeIDUserAccessLevel:         server.DataValueFromValue(accessRead),
			ua.AttributeIDMinimumSamplingInterval: server.DataValueFromValue(float64(0)),
			ua.AttributeIDHistorizing:             server.DataValueFromValue(false),
			ua.AttributeIDWriteMask:               server.DataValueFromValue(uint32(0)),
			ua.AttributeIDUserWriteMask:           server.DataValueFromValue(uint32(0)),
		}, []*ua.ReferenceDescription{
			{
				ReferenceTypeID: ua.NewNumericNodeID(0, id.HasTypeDefinition),
				IsForward:       true,
				NodeID:          ua.NewNumericExpandedNodeID(0, id.PropertyType),
				BrowseName:      &ua.QualifiedName{Name: "PropertyType"},
				DisplayName:     localized("PropertyType"),
				NodeClass:       ua.NodeClassVariableType,
				TypeDefinition:  ua.NewTwoByteExpandedNodeID(0),
			},
			{
				ReferenceTypeID: ua.NewNumericNodeID(0, id.HasProperty),
				IsForward:       false,
				NodeID:          ua.NewNumericExpandedNodeID(0, v.parent),
				BrowseName:      &ua.QualifiedName{Name: "Parent"},
				DisplayName:     localized("Parent"),
				NodeClass:       ua.NodeClassObject,
				TypeDefinition:  ua.NewTwoByteExpandedNodeID(0),
			},
		}, v.value)
		n0.AddNode(node)
		if !existed {
			if parent := n0.Node(ua.NewNumericNodeID(0, v.parent)); parent != nil {
				parent.AddRef(node, server.RefType(id.HasProperty), true)
			}
		}
	}
	return nil
}
