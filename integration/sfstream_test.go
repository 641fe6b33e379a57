package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
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

// TestSFEnqueueStreamLosesNothingAcrossAKillOfTheActive has producers
// stream messages, several in flight each, half to the Active and half to
// the Standby (which forwards), and SIGKILLs the Active mid-way. A
// producer whose stream breaks, or gets an error for a message, opens a
// new stream to a voter still running and sends again from its first
// unanswered message with the same ids. Every message answered as stored
// (or as a duplicate of a stored one) must reach the sink, and the answers
// on each stream must come in the order sent.
func TestSFEnqueueStreamLosesNothingAcrossAKillOfTheActive(t *testing.T) {
	c, sink := sfSetup(t, 1000)
	active := waitOneActive(t, c, 10*time.Second)
	voters := []*testcluster.Node{active, otherVoter(t, c, active)}
	apis := []controlpb.ControlClient{nodeClient(t, c, "operator", voters[0]), nodeClient(t, c, "operator", voters[1])}
	const producers, per = 4, 1500
	var acked, streams atomic.Int64
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second)
	defer cancel()
	errs := make(chan error, producers)
	sent := map[string]bool{} // every id, each answered as stored once its producer returns nil
	for w := range producers {
		ids := make([]string, per)
		for i := range ids {
			ids[i] = fmt.Sprintf("st-%d-%05d", w, i)
			sent[ids[i]] = true
		}
		go func() { errs <- streamAll(ctx, voters, apis, w, ids, &acked, &streams) }()
	}
	testwait.For(t, 60*time.Second, "1,500 acknowledged", func() bool { return acked.Load() >= producers*per/4 })
	c.Kill(active)
	t.Logf("SIGKILL of the Active %s at %d acknowledged", active.ID, acked.Load())
	for range producers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if streams.Load() <= producers {
		t.Fatalf("%d streams for %d producers: no stream broke or refused a message when the Active died", streams.Load(), producers)
	}
	t.Logf("%d streams opened by %d producers", streams.Load(), producers)
	waitDelivered(t, sink, sent, 90*time.Second)
}

// streamAll sends ids on SFEnqueueStream, up to 8 unanswered, until every
// one is answered as stored, starting again on a new stream to a running
// voter (apis[i] calls voters[i]) from the first unanswered id whenever a
// stream breaks or answers an error. It counts the streams it opens.
func streamAll(ctx context.Context, voters []*testcluster.Node, apis []controlpb.ControlClient, w int, ids []string, acked, streams *atomic.Int64) error {
	next := 0 // ids[:next] are answered as stored
	for try := 0; next < len(ids); try++ {
		if ctx.Err() != nil {
			return fmt.Errorf("producer %d: %d of %d answered as stored when time ran out", w, next, len(ids))
		}
		v := (w + try) % len(voters)
		if !voters[v].Running() {
			continue
		}
		from := next
		streams.Add(1)
		err := streamOnce(ctx, apis[v], ids[from:], func(id string) error {
			if id != ids[next] {
				return fmt.Errorf("producer %d on %s: answer for %s where %s was next: out of order", w, voters[v].ID, id, ids[next])
			}
			next++
			acked.Add(1)
			return nil
		})
		var order outOfOrder
		if errors.As(err, &order) {
			return err
		}
		if err != nil && next == from {
			select { // nothing went through: wait a little for a leader
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// outOfOrder is an answer that does not name the next message sent.
type outOfOrder struct{ error }

// streamOnce opens one stream and sends ids, up to 8 unanswered, handing
// stored each id answered as stored, in answer order, until all are, an
// answer carries an error, or the stream ends.
func streamOnce(ctx context.Context, api controlpb.ControlClient, ids []string, stored func(id string) error) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	stream, err := api.SFEnqueueStream(ctx)
	if err != nil {
		return err
	}
	window := make(chan struct{}, 8)
	go func() {
		for _, id := range ids {
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
				return
			}
			if stream.Send(&controlpb.SFEnqueueRequest{Target: "sink", Id: id, Payload: []byte(`{"stream":true}`)}) != nil {
				return
			}
		}
		_ = stream.CloseSend()
	}()
	for range ids {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if resp.Code != 0 {
			return fmt.Errorf("%s: %s (code %d)", resp.Id, resp.Error, resp.Code)
		}
		if err := stored(resp.Id); err != nil {
			return outOfOrder{err}
		}
		<-window
	}
	return nil
}
