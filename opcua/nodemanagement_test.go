package opcua

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"
)

// The address space is the site config's, deployed through Raft: no client
// may add or delete nodes or references, or register servers, whatever its
// session. The library would serve these services and, for one, delete the
// ServiceLevel node every redundancy client reads.
func TestNodeManagementRefused(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	c := connect(t, ts.Endpoint())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	requests := []struct {
		name string
		req  ua.Request
	}{
		{"DeleteNodes", &ua.DeleteNodesRequest{NodesToDelete: []*ua.DeleteNodesItem{{NodeID: serviceLevelID, DeleteTargetReferences: true}}}},
		{"DeleteReferences", &ua.DeleteReferencesRequest{ReferencesToDelete: []*ua.DeleteReferencesItem{{
			SourceNodeID: ua.NewNumericNodeID(0, 2268), ReferenceTypeID: ua.NewNumericNodeID(0, 46),
			IsForward: true, TargetNodeID: ua.NewExpandedNodeID(serviceLevelID, "", 0), DeleteBidirectional: true,
		}}}},
		{"AddNodes", &ua.AddNodesRequest{NodesToAdd: []*ua.AddNodesItem{{
			ParentNodeID:       ua.NewExpandedNodeID(ua.NewNumericNodeID(0, 85), "", 0),
			ReferenceTypeID:    ua.NewNumericNodeID(0, 35),
			RequestedNewNodeID: ua.NewExpandedNodeID(ua.NewStringNodeID(1, "Injected"), "", 0),
			BrowseName:         &ua.QualifiedName{NamespaceIndex: 1, Name: "Injected"},
			NodeClass:          ua.NodeClassObject,
			NodeAttributes:     ua.NewExtensionObject(nil),
			TypeDefinition:     ua.NewExpandedNodeID(ua.NewNumericNodeID(0, 58), "", 0),
		}}}},
		{"AddReferences", &ua.AddReferencesRequest{ReferencesToAdd: []*ua.AddReferencesItem{{
			SourceNodeID: ua.NewNumericNodeID(0, 85), ReferenceTypeID: ua.NewNumericNodeID(0, 35),
			IsForward: true, TargetNodeID: ua.NewExpandedNodeID(serviceLevelID, "", 0), TargetNodeClass: ua.NodeClassVariable,
		}}}},
	}
	for _, r := range requests {
		err := c.Send(ctx, r.req, func(resp ua.Response) error { return nil })
		if !errors.Is(err, ua.StatusBadServiceUnsupported) {
			t.Errorf("%s: %v, want BadServiceUnsupported", r.name, err)
		}
	}
	if got := levelOf(t, readValue(t, c, serviceLevelID, ua.AttributeIDValue)); got != ts.ServiceLevel() {
		t.Fatalf("ServiceLevel read %d after the refused requests, server says %d", got, ts.ServiceLevel())
	}
}
