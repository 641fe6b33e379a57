package opcua

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

// TestBrowseContinuationPoints: Browse honours RequestedMaxReferencesPerNode
// and hands out continuation points (Part 4, 5.8.2), BrowseNext continues
// and releases them (5.8.3), a session holds at most the
// MaxBrowseContinuationPoints it is told (one more: BadNoContinuationPoints),
// and a point released, used up or another session's is
// BadContinuationPointInvalid.
func TestBrowseContinuationPoints(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	var attrs []Attribute
	for i := range 7 {
		attrs = append(attrs, Attribute{Name: fmt.Sprintf("A%d", i), Type: TypeDouble})
	}
	if _, err := ts.ApplyModel(Model{Instances: []Instance{{Name: "Big", Attributes: attrs}}}); err != nil {
		t.Fatal(err)
	}
	c := connect(t, ts.Endpoint())
	other := connect(t, ts.Endpoint())
	folder := ts.ns.folderID("Big")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	browse := func(max uint32) *ua.BrowseResult {
		t.Helper()
		resp, err := c.Browse(ctx, &ua.BrowseRequest{RequestedMaxReferencesPerNode: max, NodesToBrowse: []*ua.BrowseDescription{{
			NodeID: folder, BrowseDirection: ua.BrowseDirectionBoth, ReferenceTypeID: ua.NewNumericNodeID(0, 0), IncludeSubtypes: true, ResultMask: uint32(ua.BrowseResultMaskAll)}}})
		if err != nil || len(resp.Results) != 1 {
			t.Fatalf("browse: %v %+v", err, resp)
		}
		return resp.Results[0]
	}
	next := func(from interface {
		Send(context.Context, ua.Request, func(ua.Response) error) error
	}, release bool, cps ...[]byte) []*ua.BrowseResult {
		t.Helper()
		var out *ua.BrowseNextResponse
		err := from.Send(ctx, &ua.BrowseNextRequest{ReleaseContinuationPoints: release, ContinuationPoints: cps}, func(r ua.Response) error {
			var ok bool
			if out, ok = r.(*ua.BrowseNextResponse); !ok {
				return fmt.Errorf("response %T", r)
			}
			return nil
		})
		if err != nil || len(out.Results) != len(cps) {
			t.Fatalf("BrowseNext: %v %+v", err, out)
		}
		return out.Results
	}

	// Its type, the site folder, the Server object (HasNotifier: an
	// instance folder is an event notifier) and 7 attributes.
	all := browse(0)
	if all.StatusCode != ua.StatusOK || len(all.References) != 10 || len(all.ContinuationPoint) != 0 {
		t.Fatalf("browse without a limit: %v, %d references, continuation point %x; want all 10 at once", all.StatusCode, len(all.References), all.ContinuationPoint)
	}
	// Three at a time, then the rest with BrowseNext: the same references.
	var got []string
	res := browse(3)
	for pages := 1; ; pages++ {
		if res.StatusCode != ua.StatusOK || len(res.References) > 3 {
			t.Fatalf("page %d: %v with %d references, want at most 3", pages, res.StatusCode, len(res.References))
		}
		for _, r := range res.References {
			got = append(got, r.NodeID.NodeID.String())
		}
		if len(res.ContinuationPoint) == 0 {
			if pages != 4 {
				t.Errorf("%d pages of 3 for 10 references", pages)
			}
			break
		}
		if pages > 10 {
			t.Fatal("continuation points without end")
		}
		res = next(c, false, res.ContinuationPoint)[0]
	}
	if fmt.Sprint(got) != fmt.Sprint(nodeIDs(all.References)) {
		t.Errorf("paged browse %v, want %v", got, nodeIDs(all.References))
	}

	// What MaxBrowseContinuationPoints says is enforced.
	maxCP, ok := readValue(t, c, ua.NewNumericNodeID(0, id.Server_ServerCapabilities_MaxBrowseContinuationPoints), ua.AttributeIDValue).Value.Value().(uint16)
	if !ok || maxCP == 0 {
		t.Fatalf("MaxBrowseContinuationPoints %v, want a bound", maxCP)
	}
	var held [][]byte
	for range maxCP {
		r := browse(1)
		if r.StatusCode != ua.StatusOK || len(r.ContinuationPoint) == 0 {
			t.Fatalf("continuation point %d of %d: %v", len(held)+1, maxCP, r.StatusCode)
		}
		held = append(held, r.ContinuationPoint)
	}
	if r := browse(1); r.StatusCode != ua.StatusBadNoContinuationPoints {
		t.Errorf("continuation point %d with %d allowed: %v, want BadNoContinuationPoints", maxCP+1, maxCP, r.StatusCode)
	}
	// Another session cannot use them.
	if r := next(other, false, held[0])[0]; r.StatusCode != ua.StatusBadContinuationPointInvalid {
		t.Errorf("another session's continuation point: %v, want BadContinuationPointInvalid", r.StatusCode)
	}
	// Released: Good, nothing returned, then invalid; and the room is back.
	rel := next(c, true, held[0], held[1])
	for _, r := range rel {
		if r.StatusCode != ua.StatusOK || len(r.References) != 0 || len(r.ContinuationPoint) != 0 {
			t.Errorf("release: %v with %d references, continuation point %x", r.StatusCode, len(r.References), r.ContinuationPoint)
		}
	}
	if r := next(c, false, held[0])[0]; r.StatusCode != ua.StatusBadContinuationPointInvalid {
		t.Errorf("a released continuation point: %v, want BadContinuationPointInvalid", r.StatusCode)
	}
	if r := next(c, false, []byte("nonsense"))[0]; r.StatusCode != ua.StatusBadContinuationPointInvalid {
		t.Errorf("an unknown continuation point: %v, want BadContinuationPointInvalid", r.StatusCode)
	}
	if r := browse(1); r.StatusCode != ua.StatusOK || len(r.ContinuationPoint) == 0 {
		t.Errorf("a browse after releasing two: %v, continuation point %x", r.StatusCode, r.ContinuationPoint)
	}
}

func nodeIDs(refs []*ua.ReferenceDescription) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.NodeID.NodeID.String()
	}
	return out
}

// TestBrowseInvalidArguments: a Browse names what is wrong with it (Part 4,
// 5.8.2.2): a view the server does not have (BadViewIdUnknown, for the
// whole request), a BrowseDirection that is none of the three
// (BadBrowseDirectionInvalid) and a ReferenceTypeId that is no reference
// type (BadReferenceTypeIdInvalid); both used to answer Good with nothing
// or everything.
func TestBrowseInvalidArguments(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	c := connect(t, ts.Endpoint())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	desc := func(node *ua.NodeID, dir ua.BrowseDirection, refType uint32) *ua.BrowseDescription {
		return &ua.BrowseDescription{NodeID: node, BrowseDirection: dir, ReferenceTypeID: ua.NewNumericNodeID(0, refType), IncludeSubtypes: true, ResultMask: uint32(ua.BrowseResultMaskAll)}
	}
	server, folder := ua.NewNumericNodeID(0, id.Server), ts.ns.folderID("Pump1")
	resp, err := c.Browse(ctx, &ua.BrowseRequest{NodesToBrowse: []*ua.BrowseDescription{
		desc(server, ua.BrowseDirectionForward, id.HierarchicalReferences),
		desc(server, ua.BrowseDirection(7), id.HierarchicalReferences),
		desc(folder, ua.BrowseDirection(7), id.HierarchicalReferences),
		desc(server, ua.BrowseDirectionForward, id.ObjectsFolder),
		desc(folder, ua.BrowseDirectionForward, id.ServerType),
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []ua.StatusCode{ua.StatusOK, ua.StatusBadBrowseDirectionInvalid, ua.StatusBadBrowseDirectionInvalid, ua.StatusBadReferenceTypeIDInvalid, ua.StatusBadReferenceTypeIDInvalid}
	for i, w := range want {
		if got := resp.Results[i].StatusCode; got != w {
			t.Errorf("description %d: %v, want %v", i, got, w)
		}
	}
	_, err = c.Browse(ctx, &ua.BrowseRequest{View: &ua.ViewDescription{ViewID: ua.NewNumericNodeID(0, id.Server)},
		NodesToBrowse: []*ua.BrowseDescription{desc(server, ua.BrowseDirectionForward, id.HierarchicalReferences)}})
	if !errors.Is(err, ua.StatusBadViewIDUnknown) {
		t.Errorf("a Browse in view i=%d: %v, want BadViewIdUnknown", id.Server, err)
	}
}

// TestBrowseResultMask: a Browse returns only the fields of each
// ReferenceDescription its ResultMask asks for, the others null (Part 4,
// 5.8.2.2 and 7.5, BrowseResultMask), on namespace 0, the site namespace
// and its analog properties, and on the pages BrowseNext hands out too.
func TestBrowseResultMask(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	c := connect(t, ts.Endpoint())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	browse := func(nid *ua.NodeID, mask uint32) []*ua.ReferenceDescription {
		t.Helper()
		resp, err := c.Browse(ctx, &ua.BrowseRequest{RequestedMaxReferencesPerNode: 2, NodesToBrowse: []*ua.BrowseDescription{{
			NodeID: nid, BrowseDirection: ua.BrowseDirectionBoth, ReferenceTypeID: ua.NewNumericNodeID(0, 0), IncludeSubtypes: true, ResultMask: mask}}})
		if err != nil || len(resp.Results) != 1 || resp.Results[0].StatusCode != ua.StatusOK {
			t.Fatalf("browse %v mask %d: %v %+v", nid, mask, err, resp)
		}
		refs, cp := resp.Results[0].References, resp.Results[0].ContinuationPoint
		for len(cp) > 0 {
			var next *ua.BrowseNextResponse
			if err := c.Send(ctx, &ua.BrowseNextRequest{ContinuationPoints: [][]byte{cp}}, func(r ua.Response) error {
				next, _ = r.(*ua.BrowseNextResponse)
				return nil
			}); err != nil || next == nil || len(next.Results) != 1 || next.Results[0].StatusCode != ua.StatusOK {
				t.Fatalf("BrowseNext %v mask %d: %v %+v", nid, mask, err, next)
			}
			refs, cp = append(refs, next.Results[0].References...), next.Results[0].ContinuationPoint
		}
		return refs
	}
	nullNode := func(n *ua.NodeID) bool { return n == nil || isNullNodeID(n) }
	nullExpanded := func(n *ua.ExpandedNodeID) bool { return n == nil || nullNode(n.NodeID) }
	nodes := []*ua.NodeID{
		ua.NewNumericNodeID(0, id.Server), ua.NewNumericNodeID(0, id.Server_ServiceLevel),
		ts.ns.rootID(), ts.ns.folderID("Pump1"), ts.NodeID("Pump1", "Speed"),
	}
	for _, nid := range nodes {
		full := browse(nid, uint32(ua.BrowseResultMaskAll))
		if len(full) < 2 {
			t.Fatalf("%v: %d references", nid, len(full))
		}
		for bit := uint32(0); bit <= 6; bit++ {
			mask := uint32(0)
			if bit > 0 {
				mask = 1 << (bit - 1)
			}
			got := browse(nid, mask)
			if len(got) != len(full) {
				t.Fatalf("%v mask %#x: %d references, %d with every field", nid, mask, len(got), len(full))
			}
			for i, r := range got {
				want := full[i]
				if r.NodeID == nil || r.NodeID.NodeID.String() != want.NodeID.NodeID.String() {
					t.Fatalf("%v mask %#x reference %d: NodeId %v, want %v (always returned)", nid, mask, i, r.NodeID, want.NodeID)
				}
				check := func(field string, bit ua.BrowseResultMask, asked bool, null bool) {
					t.Helper()
					has := mask&uint32(bit) != 0
					if has && !asked {
						t.Errorf("%v mask %#x reference %d (%v): %s not as a full browse gives it", nid, mask, i, want.NodeID, field)
					}
					if !has && !null {
						t.Errorf("%v mask %#x reference %d (%v): %s returned though the mask does not ask for it", nid, mask, i, want.NodeID, field)
					}
				}
				check("ReferenceTypeId", ua.BrowseResultMaskReferenceTypeID,
					r.ReferenceTypeID != nil && r.ReferenceTypeID.String() == want.ReferenceTypeID.String(), nullNode(r.ReferenceTypeID))
				check("IsForward", ua.BrowseResultMaskIsForward, r.IsForward == want.IsForward, !r.IsForward)
				check("NodeClass", ua.BrowseResultMaskNodeClass, r.NodeClass == want.NodeClass, r.NodeClass == 0)
				check("BrowseName", ua.BrowseResultMaskBrowseName,
					r.BrowseName != nil && *r.BrowseName == *want.BrowseName, r.BrowseName == nil || *r.BrowseName == ua.QualifiedName{})
				check("DisplayName", ua.BrowseResultMaskDisplayName,
					r.DisplayName != nil && r.DisplayName.Text == want.DisplayName.Text, r.DisplayName == nil || r.DisplayName.Text == "")
				check("TypeDefinition", ua.BrowseResultMaskTypeDefinition,
					r.TypeDefinition != nil && r.TypeDefinition.NodeID.String() == want.TypeDefinition.NodeID.String(), nullExpanded(r.TypeDefinition))
			}
		}
	}
}
