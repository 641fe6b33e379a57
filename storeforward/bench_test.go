package storeforward

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/role"
)

// BenchmarkEnqueue: 64 concurrent callers, 256-byte payloads, into a real
// FSM (fsync on or off) through the in-test proposer.
func BenchmarkEnqueue(b *testing.B) {
	for _, sync := range []bool{true, false} {
		b.Run(fmt.Sprintf("fsync=%v", sync), func(b *testing.B) {
			f := newFSM(b, !sync)
			p := &applyProposer{f: f}
			e, err := NewEnqueuer(EnqueuerOptions{Proposer: p, Targets: StaticTargets{"up": {Name: "up", URL: "http://x"}}, Logger: zerolog.Nop()})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			payload := make([]byte, 256)
			var seq atomic.Uint64
			b.SetParallelism((64 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := e.Enqueue(context.Background(), "up", payload, fmt.Sprint("m", seq.Add(1)), nil); err != nil {
						b.Error(err)
						return
					}
				}
			})
			elapsed := time.Since(start)
			b.StopTimer()
			cmds := len(p.commands(isEnqueue))
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
			b.ReportMetric(float64(b.N)/float64(max(cmds, 1)), "msgs/entry")
		})
	}
}

// BenchmarkDelivery drains b.N messages spread over 4 targets to a local
// httptest sink, with batched SFDelivered commits into a real FSM.
func BenchmarkDelivery(b *testing.B) {
	for _, sync := range []bool{true, false} {
		b.Run(fmt.Sprintf("fsync=%v", sync), func(b *testing.B) {
			const targets = 4
			f := newFSM(b, !sync)
			p := &applyProposer{f: f}
			var got atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got.Add(1)
				w.WriteHeader(http.StatusNoContent)
			}))
			defer srv.Close()
			var ts []Target
			for i := 0; i < targets; i++ {
				ts = append(ts, Target{Name: fmt.Sprint("t", i), URL: srv.URL})
			}
			// Fill the buffer directly, in big commands.
			payload := make([]byte, 256)
			for start := 0; start < b.N; start += fsm.MaxEnqueueBatch {
				var msgs []*fsmpb.Message
				for i := start; i < min(start+fsm.MaxEnqueueBatch, b.N); i++ {
					msgs = append(msgs, &fsmpb.Message{Id: fmt.Sprint("m", i), Target: fmt.Sprint("t", i%targets), Payload: payload})
				}
				res, err := p.Propose(context.Background(), &fsmpb.Command{Body: &fsmpb.Command_SfEnqueue{SfEnqueue: &fsmpb.SFEnqueue{Messages: msgs}}})
				if err != nil || res.Err != nil {
					b.Fatal(err, res.Err)
				}
			}
			roles := role.NewBroadcaster(role.State{Role: role.Standby})
			d, err := NewDeliverer(DelivererOptions{Reader: f, Proposer: p, Roles: roles, Logger: zerolog.Nop()})
			if err != nil {
				b.Fatal(err)
			}
			if err := d.SetTargets(ts); err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = d.Run(ctx) }()
			defer func() { cancel(); <-done }()
			changes, stop := f.Changes()
			defer stop()

			b.ResetTimer()
			start := time.Now()
			roles.Publish(activeState(1, 1))
			for {
				st, err := f.SFStats()
				if err != nil {
					b.Fatal(err)
				}
				left := uint64(0)
				for _, s := range st {
					left += s.Pending
				}
				if left == 0 {
					break
				}
				select {
				case <-changes:
				case <-time.After(30 * time.Second):
					b.Fatalf("no progress for 30 s with %d pending", left)
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			removals := p.commands(isDelivered)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
			b.ReportMetric(float64(b.N)/float64(max(len(removals), 1)), "ids/removal")
			if got.Load() < int64(b.N) {
				b.Fatalf("sink got %d of %d", got.Load(), b.N)
			}
		})
	}
}

// echoProposer answers every SFEnqueue at once, as added, from a goroutine
// of its own (as raft answers from its FSM goroutine): what the Enqueuer
// adds to one enqueue's latency, without raft or the FSM.
type echoProposer struct{ reqs chan *fsmpb.Command }

func (p echoProposer) Propose(ctx context.Context, cmd *fsmpb.Command) (*fsm.Result, error) {
	p.reqs <- cmd
	<-p.reqs
	n := len(cmd.GetSfEnqueue().GetMessages())
	return &fsm.Result{Enqueue: &fsm.EnqueueOutcome{Items: make([]fsm.EnqueueItem, n), Added: n}}, nil
}

// BenchmarkLoneEnqueue: one caller enqueueing one message at a time, the
// proposer answering at once from another goroutine.
func BenchmarkLoneEnqueue(b *testing.B) {
	p := echoProposer{reqs: make(chan *fsmpb.Command)}
	go func() {
		for cmd := range p.reqs {
			p.reqs <- cmd
		}
	}()
	defer close(p.reqs)
	e, err := NewEnqueuer(EnqueuerOptions{Proposer: p, Targets: StaticTargets{"up": {Name: "up", URL: "http://x"}}, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	payload := make([]byte, 256)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := e.Enqueue(ctx, "up", payload, fmt.Sprint("m", i), nil); err != nil {
			b.Fatal(err)
		}
	}
}
