package integration

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
)

// TestSFEnqueueStreamAnswersEachMessageInOrder pipelines messages on one
// SFEnqueueStream to the Active node and to a follower (which forwards):
// every message is answered in the order sent, a refused one with its code
// while the stream goes on, a repeated id as a duplicate, and what was
// answered as stored is pending.
func TestSFEnqueueStreamAnswersEachMessageInOrder(t *testing.T) {
	c, _, active := sfSetupPending(t)
	var follower *testcluster.Node
	for _, n := range c.Nodes {
		if !n.Witness && n != active {
			follower = n
		}
	}
	const n = 300
	stored := 0
	for _, node := range []*testcluster.Node{active, follower} {
		type sent struct {
			id   string
			code codes.Code
			dup  bool
		}
		var want []sent
		var reqs []*controlpb.SFEnqueueRequest
		for i := range n {
			r := &controlpb.SFEnqueueRequest{Target: "sink", Id: fmt.Sprintf("%s-%03d", node.ID, i), Payload: []byte("payload")}
			s := sent{id: r.Id}
			switch {
			case i%50 == 7:
				r.Target, s.code = "no-such-target", codes.NotFound
			case i == 100:
				r.Payload, s.code = bytes.Repeat([]byte("x"), 70_000), codes.InvalidArgument
			case i == 150:
				r.Id, s.id, s.dup = reqs[149].Id, reqs[149].Id, true
			case i == 200:
				r.Target, s.code = "", codes.InvalidArgument
			case i == 250:
				// Delivery could never send it as Idempotency-Key.
				r.Id, s.id, s.code = r.Id+"\n", r.Id+"\n", codes.InvalidArgument
			}
			reqs, want = append(reqs, r), append(want, s)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		stream, err := nodeClient(t, c, "operator", node).SFEnqueueStream(ctx)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		for _, r := range reqs { // all before reading any answer
			if err := stream.Send(r); err != nil {
				cancel()
				t.Fatalf("%s: send %s: %v", node.ID, r.Id, err)
			}
		}
		if err := stream.CloseSend(); err != nil {
			cancel()
			t.Fatal(err)
		}
		for i, w := range want {
			resp, err := stream.Recv()
			if err != nil {
				cancel()
				t.Fatalf("%s: answer %d: %v", node.ID, i, err)
			}
			if resp.Id != w.id || codes.Code(resp.Code) != w.code || resp.Duplicate != w.dup {
				cancel()
				t.Fatalf("%s: answer %d is {id %q code %v duplicate %v error %q}, want {id %q code %v duplicate %v}",
					node.ID, i, resp.Id, codes.Code(resp.Code), resp.Duplicate, resp.Error, w.id, w.code, w.dup)
			}
			if w.code == codes.OK && !w.dup {
				stored++
			}
		}
		if _, err := stream.Recv(); err == nil {
			t.Errorf("%s: an answer beyond the %d messages sent", node.ID, n)
		}
		cancel()
	}
	// The Active applied every message before it was answered.
	var stats []*controlpb.SFTargetStats
	ctlJSON(t, c, []*testcluster.Node{active}, &stats, "sf", "stats")
	if len(stats) != 1 || stats[0].Target != "sink" || stats[0].Pending != uint64(stored) {
		t.Fatalf("sf stats %v, want %d pending on sink: the messages answered as stored", stats, stored)
	}
}
