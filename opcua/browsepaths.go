package opcua

import (
	"math"

	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uasc"
)

// translateBrowsePaths serves TranslateBrowsePathsToNodeIds (Part 4,
// 5.8.4), mandatory for the Core Server Facet and how HMIs resolve tags by
// path; the library answers BadServiceUnsupported. Each element of a
// relative path is followed with the same Browse the Browse service uses
// (browseWithConditions), both namespaces alike, so a path reaches every
// node a Browse shows: conditions and their fields too.
func (s *Server) translateBrowsePaths(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	req, ok := r.(*ua.TranslateBrowsePathsToNodeIDsRequest)
	if !ok {
		return nil, ua.StatusBadRequestTypeInvalid
	}
	if len(req.BrowsePaths) == 0 {
		return nil, ua.StatusBadNothingToDo
	}
	if err := s.checkCount(len(req.BrowsePaths)); err != nil {
		return nil, err
	}
	results := make([]*ua.BrowsePathResult, len(req.BrowsePaths))
	for i, p := range req.BrowsePaths {
		results[i] = s.translateOne(p)
	}
	return &ua.TranslateBrowsePathsToNodeIDsResponse{ResponseHeader: responseHeader(req.RequestHeader, s.clock.Now()),
		Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}, nil
}

// maxPathTargets bounds the nodes one step of a path may lead to, so a
// path of wildcard-like steps cannot make the answer grow without bound.
const maxPathTargets = 1000

func (s *Server) translateOne(p *ua.BrowsePath) *ua.BrowsePathResult {
	fail := func(c ua.StatusCode) *ua.BrowsePathResult {
		return &ua.BrowsePathResult{StatusCode: c, Targets: []*ua.BrowsePathTarget{}}
	}
	if p == nil || p.StartingNode == nil {
		return fail(ua.StatusBadNodeIDInvalid)
	}
	if p.RelativePath == nil || len(p.RelativePath.Elements) == 0 {
		return fail(ua.StatusBadNothingToDo)
	}
	if res := s.browseWithConditions(&ua.BrowseDescription{NodeID: p.StartingNode, ReferenceTypeID: ua.NewTwoByteNodeID(0)}); res.StatusCode != ua.StatusOK {
		return fail(ua.StatusBadNodeIDUnknown)
	}
	current := []*ua.NodeID{p.StartingNode}
	for _, el := range p.RelativePath.Elements {
		if el == nil || el.TargetName == nil || el.TargetName.Name == "" {
			return fail(ua.StatusBadBrowseNameInvalid)
		}
		// A null ReferenceTypeId follows every reference (Part 4, 7.26).
		refType := el.ReferenceTypeID
		if refType == nil {
			refType = ua.NewTwoByteNodeID(0)
		}
		dir := ua.BrowseDirectionForward
		if el.IsInverse {
			dir = ua.BrowseDirectionInverse
		}
		var next []*ua.NodeID
		seen := map[string]bool{} // a node reached twice (duplicate references) is one target
		for _, n := range current {
			res := s.browseWithConditions(&ua.BrowseDescription{NodeID: n, BrowseDirection: dir, ReferenceTypeID: refType,
				IncludeSubtypes: el.IncludeSubtypes, ResultMask: uint32(ua.BrowseResultMaskAll)})
			for _, rd := range res.References {
				if rd.BrowseName == nil || rd.NodeID == nil || rd.NodeID.NodeID == nil {
					continue
				}
				key := rd.NodeID.NodeID.String()
				if rd.BrowseName.NamespaceIndex == el.TargetName.NamespaceIndex && rd.BrowseName.Name == el.TargetName.Name && !seen[key] && len(next) < maxPathTargets {
					seen[key] = true
					next = append(next, rd.NodeID.NodeID)
				}
			}
		}
		if len(next) == 0 {
			return fail(ua.StatusBadNoMatch)
		}
		current = next
	}
	targets := make([]*ua.BrowsePathTarget, len(current))
	for i, n := range current {
		targets[i] = &ua.BrowsePathTarget{TargetID: &ua.ExpandedNodeID{NodeID: n}, RemainingPathIndex: math.MaxUint32}
	}
	return &ua.BrowsePathResult{StatusCode: ua.StatusOK, Targets: targets}
}
