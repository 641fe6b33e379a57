package opcua

import (
	"time"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

// The metadata of the namespaces scadad defines (Part 5, 6.3.13 and
// 6.3.14): under Server.Namespaces, beside namespace 0's, one
// NamespaceMetadataType object for namespace 1 (the server's own, its
// ApplicationUri) and one for the site's namespace. Each lives in the
// namespace it describes, as a companion specification's does, named by
// that namespace's URI, with numeric node ids no other node there uses
// (the site's nodes are strings but for its folder, i=85).
const (
	metaObjectID uint32 = 15001 + iota
	metaNamespaceURIID
	metaNamespaceVersionID
	metaPublicationDateID
	metaIsSubsetID
	metaStaticIDTypesID
	metaStaticNumericRangeID
	metaStaticStringPatternID
)

// metaProperty is one of NamespaceMetadataType's mandatory properties.
type metaProperty struct {
	node     uint32
	name     string
	dataType uint32
	rank     int32
}

var metaProperties = []metaProperty{
	{metaNamespaceURIID, "NamespaceUri", id.String, -1},
	{metaNamespaceVersionID, "NamespaceVersion", id.String, -1},
	{metaPublicationDateID, "NamespacePublicationDate", id.DateTime, -1},
	{metaIsSubsetID, "IsNamespaceSubset", id.Boolean, -1},
	{metaStaticIDTypesID, "StaticNodeIdTypes", id.IDType, 1},
	{metaStaticNumericRangeID, "StaticNumericNodeIdRange", id.NumericRange, 1},
	{metaStaticStringPatternID, "StaticStringNodeIdPattern", id.String, -1},
}

// namespaceMeta is what one namespace's metadata says.
type namespaceMeta struct {
	idx       uint16
	uri       string
	version   string
	published time.Time
}

// describedNamespace is the namespace whose metadata nid belongs to, and
// the property (nil: the object itself); ok is false for any other node.
func (s *Server) describedNamespace(nid *ua.NodeID) (meta namespaceMeta, prop *metaProperty, ok bool) {
	if nid == nil || !numericNodeID(nid) {
		return namespaceMeta{}, nil, false
	}
	if n := nid.IntID(); n != metaObjectID {
		for i := range metaProperties {
			if metaProperties[i].node == n {
				prop = &metaProperties[i]
			}
		}
		if prop == nil {
			return namespaceMeta{}, nil, false
		}
	}
	switch nid.Namespace() {
	case 0:
		return namespaceMeta{}, nil, false
	case 1:
		// Namespace 1 holds nothing but this metadata: its content is the
		// build's.
		return namespaceMeta{idx: 1, uri: s.appURI, version: s.softwareVersion(), published: s.cfg.Build.BuildDate}, prop, true
	case s.ns.idx:
		return s.ns.metadata(), prop, true
	}
	return namespaceMeta{}, nil, false
}

// value is the value of property p. No node scadad serves outside
// namespace 0 is static (Part 5, 6.3.14: identical in every server, the
// Value too): namespace 1 is each server's own, the site's follows each
// deploy and carries live values. Both are served whole.
func (m namespaceMeta) value(p *metaProperty) any {
	switch p.node {
	case metaNamespaceURIID:
		return m.uri
	case metaNamespaceVersionID:
		return m.version
	case metaPublicationDateID:
		return m.published
	case metaIsSubsetID:
		return false
	case metaStaticIDTypesID:
		return []int32{}
	case metaStaticNumericRangeID:
		return []string{}
	default:
		return ""
	}
}

// metadataObjectRefs are Server.Namespaces' references to the metadata
// objects of namespace 1 and the site's.
func (s *Server) metadataObjectRefs() []ref {
	var refs []ref
	for _, idx := range []uint16{1, s.ns.idx} {
		meta, _, _ := s.describedNamespace(ua.NewNumericNodeID(idx, metaObjectID))
		refs = append(refs, ref{refType: id.HasComponent, forward: true, target: ua.NewNumericNodeID(idx, metaObjectID),
			name: meta.uri, class: ua.NodeClassObject, typeDef: id.NamespaceMetadataType, targetNS: idx})
	}
	return refs
}

// browseMetadata answers a Browse of a metadata object or property.
func (s *Server) browseMetadata(bd *ua.BrowseDescription) (*ua.BrowseResult, bool) {
	meta, prop, ok := s.describedNamespace(bd.NodeID)
	if !ok {
		return nil, false
	}
	object := ua.NewNumericNodeID(meta.idx, metaObjectID)
	var refs []ref
	if prop == nil {
		refs = []ref{
			{refType: id.HasTypeDefinition, forward: true, target: ua.NewNumericNodeID(0, id.NamespaceMetadataType), name: "NamespaceMetadataType", class: ua.NodeClassObjectType},
			{refType: id.HasComponent, forward: false, target: ua.NewNumericNodeID(0, id.Server_Namespaces), name: "Namespaces", class: ua.NodeClassObject, typeDef: id.NamespacesType},
		}
		for _, p := range metaProperties {
			refs = append(refs, ref{refType: id.HasProperty, forward: true, target: ua.NewNumericNodeID(meta.idx, p.node), name: p.name, class: ua.NodeClassVariable, typeDef: id.PropertyType})
		}
	} else {
		refs = []ref{
			{refType: id.HasTypeDefinition, forward: true, target: ua.NewNumericNodeID(0, id.PropertyType), name: "PropertyType", class: ua.NodeClassVariableType},
			{refType: id.HasProperty, forward: false, target: object, name: meta.uri, class: ua.NodeClassObject, typeDef: id.NamespaceMetadataType, targetNS: meta.idx},
		}
	}
	return &ua.BrowseResult{StatusCode: ua.StatusGood, References: describeRefs(bd, refs, s.refTypes)}, true
}

// readMetadata answers a Read of a metadata object or property.
func (s *Server) readMetadata(rv *ua.ReadValueID, now time.Time) (*ua.DataValue, bool) {
	meta, prop, ok := s.describedNamespace(rv.NodeID)
	if !ok {
		return nil, false
	}
	if prop != nil {
		return readOnlyProperty(rv.NodeID, rv.AttributeID, prop.name, meta.value(prop), prop.dataType, prop.rank, now), true
	}
	return readObject(rv.NodeID, rv.AttributeID, &ua.QualifiedName{NamespaceIndex: meta.idx, Name: meta.uri}, meta.uri, "", now), true
}
