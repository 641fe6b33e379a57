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
