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

// stdVar is a namespace-0 variable scadad serves in place of the
// library's: its node id, browse name, DataType, ValueRank, the object it
// is a property of, and where its value comes from.
type stdVar struct {
	node     uint32
	name     string
	dataType uint32
	rank     int32
	parent   uint32
	value    func() *ua.DataValue
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
	vars := []stdVar{
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
		vars = append(vars, stdVar{l.node, l.name, id.UInt32, -1, id.Server_ServerCapabilities_OperationLimits, limit})
	}
	// NamespaceArray: the library's is an Object named "Namespaces".
	vars = append(vars, stdVar{id.Server_NamespaceArray, "NamespaceArray", id.String, 1, id.Server, func() *ua.DataValue {
		var uris []string
		for _, n := range s.srv().Namespaces() {
			uris = append(uris, n.Name())
		}
		return plainValue(uris, s.clock.Now())
	}})
	if err := s.installRedundancyObject(n0); err != nil {
		return err
	}
	for _, v := range vars {
		nid := ua.NewNumericNodeID(0, v.node)
		existed := n0.Node(nid) != nil
		node := server.NewNode(nid, readOnlyVariable(v.name, v.dataType, v.rank), []*ua.ReferenceDescription{
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

// installRedundancyObject replaces Server.ServerRedundancy, which the
// library types ServerRedundancyType whatever the RedundancySupport, with
// an object of type NonTransparentRedundancyType (Warm or Hot, what scadad
// serves: each node is its own server, clients choose by ServiceLevel)
// whose properties, RedundancySupport and ServerUriArray, are browsable.
func (s *Server) installRedundancyObject(n0 *server.NodeNameSpace) error {
	nid := ua.NewNumericNodeID(0, id.Server_ServerRedundancy)
	if n0.Node(nid) == nil {
		return fmt.Errorf("opcua namespace 0 has no Server.ServerRedundancy")
	}
	ref := func(refType uint32, forward bool, target uint32, name string, class ua.NodeClass) *ua.ReferenceDescription {
		return &ua.ReferenceDescription{
			ReferenceTypeID: ua.NewNumericNodeID(0, refType), IsForward: forward,
			NodeID: ua.NewNumericExpandedNodeID(0, target), BrowseName: &ua.QualifiedName{Name: name},
			DisplayName: localized(name), NodeClass: class, TypeDefinition: ua.NewTwoByteExpandedNodeID(0),
		}
	}
	node := server.NewNode(nid, server.Attributes{
		ua.AttributeIDNodeClass:     server.DataValueFromValue(uint32(ua.NodeClassObject)),
		ua.AttributeIDBrowseName:    server.DataValueFromValue(&ua.QualifiedName{Name: "ServerRedundancy"}),
		ua.AttributeIDDisplayName:   server.DataValueFromValue(localized("ServerRedundancy")),
		ua.AttributeIDDescription:   server.DataValueFromValue(localized("")),
		ua.AttributeIDEventNotifier: server.DataValueFromValue(byte(0)),
		ua.AttributeIDWriteMask:     server.DataValueFromValue(uint32(0)),
		ua.AttributeIDUserWriteMask: server.DataValueFromValue(uint32(0)),
	}, []*ua.ReferenceDescription{
		ref(id.HasTypeDefinition, true, id.NonTransparentRedundancyType, "NonTransparentRedundancyType", ua.NodeClassObjectType),
		ref(id.HasComponent, false, id.Server, "Server", ua.NodeClassObject),
		ref(id.HasProperty, true, id.Server_ServerRedundancy_RedundancySupport, "RedundancySupport", ua.NodeClassVariable),
		ref(id.HasProperty, true, id.Server_ServerRedundancy_ServerURIArray, "ServerUriArray", ua.NodeClassVariable),
	}, nil)
	n0.AddNode(node)
	return nil
}
