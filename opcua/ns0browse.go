package opcua

import (
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/server"
	"github.com/gopcua/opcua/ua"
)

// refHierarchy is each reference type's supertype, read once from
// namespace 0's HasSubtype references, so a Browse or a browse path that
// asks for a reference type with its subtypes matches every subtype the
// standard defines, in both namespaces.
type refHierarchy map[uint32]uint32

// maxRefTypeDepth bounds the walk up the hierarchy (the standard's is 6
// deep); a cycle in an imported nodeset cannot make it loop.
const maxRefTypeDepth = 32

func buildRefHierarchy(n0 *server.NodeNameSpace) refHierarchy {
	h := refHierarchy{}
	queue := []uint32{id.References}
	for len(queue) > 0 && len(h) < 10_000 {
		parent := queue[0]
		queue = queue[1:]
		res := n0.Browse(&ua.BrowseDescription{NodeID: ua.NewNumericNodeID(0, parent), BrowseDirection: ua.BrowseDirectionForward,
			ReferenceTypeID: ua.NewTwoByteNodeID(0), IncludeSubtypes: true, ResultMask: uint32(ua.BrowseResultMaskAll)})
		for _, r := range res.References {
			if r.ReferenceTypeID.IntID() != id.HasSubtype || r.NodeID == nil || r.NodeID.NodeID == nil || r.NodeID.NodeID.Namespace() != 0 {
				continue
			}
			child := r.NodeID.NodeID.IntID()
			if _, known := h[child]; known || child == id.References {
				continue
			}
			h[child] = parent
			queue = append(queue, child)
		}
	}
	return h
}

// matches says whether a reference of type have is one a request for
// want (with its subtypes when subtypes) asks for; a null want asks for
// every reference (Part 4, 5.8.2 and 7.26).
func (h refHierarchy) matches(want *ua.NodeID, subtypes bool, have uint32) bool {
	if want == nil || isNullNodeID(want) {
		return true
	}
	if want.Namespace() != 0 || !numericNodeID(want) {
		return false
	}
	w := want.IntID()
	if w == have {
		return true
	}
	if !subtypes {
		return false
	}
	for t, i := have, 0; i < maxRefTypeDepth; i++ {
		parent, ok := h[t]
		if !ok {
			return false
		}
		if parent == w {
			return true
		}
		t = parent
	}
	return false
}

// isReferenceType says whether n is null (any reference) or names a
// reference type of namespace 0.
func (h refHierarchy) isReferenceType(n *ua.NodeID) bool {
	if isNullNodeID(n) {
		return true
	}
	if n.Namespace() != 0 || !numericNodeID(n) {
		return false
	}
	_, ok := h[n.IntID()]
	return ok || n.IntID() == id.References
}

func numericNodeID(n *ua.NodeID) bool {
	switch n.Type() {
	case ua.NodeIDTypeTwoByte, ua.NodeIDTypeFourByte, ua.NodeIDTypeNumeric:
		return true
	}
	return false
}

func isNullNodeID(n *ua.NodeID) bool {
	return n.Namespace() == 0 && numericNodeID(n) && n.IntID() == 0
}

// browseNS0 answers a Browse of a namespace-0 node. The library lists
// references as its import left them (WORKAROUNDS.md row 21): twice,
// named after the source or "Parent", with the target's DataType as
// their TypeDefinition, and it matches subtypes even when
// IncludeSubtypes is false. Here each reference is listed once, with the
// target's BrowseName, DisplayName, NodeClass and TypeDefinition, none to
// a part of the Server object scadad does not serve, filtered as bd asks.
func (s *Server) browseNS0(n0 *server.NodeNameSpace, bd *ua.BrowseDescription) *ua.BrowseResult {
	all := n0.Browse(&ua.BrowseDescription{NodeID: bd.NodeID, BrowseDirection: ua.BrowseDirectionBoth,
		ReferenceTypeID: ua.NewTwoByteNodeID(0), IncludeSubtypes: true, ResultMask: uint32(ua.BrowseResultMaskAll)})
	if all.StatusCode != ua.StatusOK {
		return all
	}
	type key struct {
		refType uint32
		forward bool
		target  string
	}
	seen := make(map[key]bool, len(all.References))
	out := make([]*ua.ReferenceDescription, 0, len(all.References))
	for _, r := range all.References {
		if r == nil || r.ReferenceTypeID == nil || r.NodeID == nil || r.NodeID.NodeID == nil {
			continue
		}
		target := r.NodeID.NodeID
		if r.IsForward && target.Namespace() == 0 && unservedServerChildren[target.IntID()] {
			continue
		}
		refType := r.ReferenceTypeID.IntID()
		if !directionMatches(bd.BrowseDirection, r.IsForward) || !s.refTypes.matches(bd.ReferenceTypeID, bd.IncludeSubtypes, refType) {
			continue
		}
		k := key{refType, r.IsForward, target.String()}
		if seen[k] {
			continue
		}
		rd := *r
		if target.Namespace() == 0 {
			t := n0.Node(target)
			if t == nil {
				continue // a dangling reference of the import
			}
			rd.BrowseName, rd.DisplayName, rd.NodeClass = t.BrowseName(), t.DisplayName(), t.NodeClass()
			rd.TypeDefinition = ua.NewTwoByteExpandedNodeID(0)
			if rd.NodeClass == ua.NodeClassObject || rd.NodeClass == ua.NodeClassVariable {
				if td := typeDefinitionOf(n0, target); td != nil {
					rd.TypeDefinition = td
				}
			}
		}
		if bd.NodeClassMask != 0 && bd.NodeClassMask&uint32(rd.NodeClass) == 0 {
			continue
		}
		seen[k] = true
		out = append(out, &rd)
	}
	return &ua.BrowseResult{StatusCode: ua.StatusOK, References: out}
}

// typeDefinitionOf is the target of nid's HasTypeDefinition reference.
func typeDefinitionOf(n0 *server.NodeNameSpace, nid *ua.NodeID) *ua.ExpandedNodeID {
	res := n0.Browse(&ua.BrowseDescription{NodeID: nid, BrowseDirection: ua.BrowseDirectionForward,
		ReferenceTypeID: ua.NewTwoByteNodeID(0), IncludeSubtypes: true, ResultMask: uint32(ua.BrowseResultMaskAll)})
	for _, r := range res.References {
		if r.ReferenceTypeID.IntID() == id.HasTypeDefinition && r.NodeID != nil && r.NodeID.NodeID != nil {
			return ua.NewExpandedNodeID(r.NodeID.NodeID, "", 0)
		}
	}
	return nil
}
