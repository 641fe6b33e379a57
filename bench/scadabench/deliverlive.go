//go:build unix

package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/storeforward"
)

// deliverLiveResult is the delivery rate while producers enqueue: over a
// window in steady state, what the producers got acknowledged and what
// reached the receiver, and the backlog at the window's start and end (a
// backlog that grows is a delivery that does not keep up).
type deliverLiveResult struct {
	Kind           string  `json:"kind"`
	Producers      int     `json:"producers"`
	ValueBytes     int     `json:"value_bytes"`
	WindowSeconds  float64 `json:"window_s"`
	Enqueued       int64   `json:"enqueued"`
	EnqueuedPerSec float64 `json:"enqueued_per_s"`
	Errors         int64   `json:"errors"`
	// Received counts the distinct message ids that first reached the
	// receiver in the window.
	Received       int     `json:"received"`
	ReceivedPerSec float64 `json:"received_per_s"`
	BacklogStart   uint64  `json:"backlog_start"`
	BacklogEnd     uint64  `json:"backlog_end"`
}

// arrivals counts the distinct message ids a receiver has got.
type arrivals interface {
	// mark is a point in what the receiver got so far.
	mark(ctx context.Context) (any, error)
	// between is how many distinct ids first arrived between two marks.
	between(ctx context.Context, from, to any) (int, error)
}

// deliverLivePhase measures delivery while -deliver-producers producers
// enqueue -value-size messages for -deliver-warmup and then the
// -deliver-window measured. The receiver accepts from the start (setup
// left it so: -deliver-mode live runs this phase alone).
func (b *bench) deliverLivePhase(producers, size int) (*deliverLiveResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var arr arrivals
	switch {
	case b.pg != nil:
		conn, err := b.pg.Connect(ctx)
		if err != nil {
			return nil, err
		}
		defer conn.Close(context.Background())
		arr = pgRows{conn}
	case b.mq != nil:
		rec, err := b.mq.Subscribe("scadabench-receiver", "bench/#")
		if err != nil {
			return nil, err
		}
		defer rec.Close()
		arr = mqttArrivals{rec}
	default:
		arr = sinkArrivals{b.sink}
	}
	// What setup enqueued is delivered first: the window starts from an
	// empty buffer.
	if err := testwait.Poll(ctx, func() bool {
		p, err := b.pending(ctx)
		return err == nil && p == 0
	}); err != nil {
		return nil, fmt.Errorf("drain the setup's messages: %w", err)
	}
	lead, err := b.leader()
	if err != nil {
		return nil, err
	}
	conns := make([]*multi, producers)
	for i := range conns {
		if conns[i], err = b.clientFor([]*testcluster.Node{lead}); err != nil {
			return nil, err
		}
		defer conns[i].Close()
	}
	var acked atomic.Int64
	done := make(chan writeResult, 1)
	go func() {
		done <- runLoad(conns, producers, size, b.o.deliverWarmup+b.o.deliverWindow, 0, seqIDs(fmt.Sprintf("live%d", time.Now().UnixNano())), &acked)
	}()
	snapshot := func() (enq int64, backlog uint64, at any, err error) {
		enq = acked.Load()
		if backlog, err = b.pending(ctx); err != nil {
			return 0, 0, nil, err
		}
		at, err = arr.mark(ctx)
		return enq, backlog, at, err
	}
	time.Sleep(b.o.deliverWarmup)
	t0 := time.Now()
	enq0, backlog0, mark0, err := snapshot()
	if err != nil {
		return nil, err
	}
	stop := b.profile("deliver-live", b.o.deliverWindow)
	time.Sleep(time.Until(t0.Add(b.o.deliverWindow)))
	enq1, backlog1, mark1, err := snapshot()
	secs := time.Since(t0).Seconds()
	stop()
	w := <-done
	if err != nil {
		return nil, err
	}
	received, err := arr.between(ctx, mark0, mark1)
	if err != nil {
		return nil, err
	}
	return &deliverLiveResult{Kind: b.o.deliverKind, Producers: producers, ValueBytes: size, WindowSeconds: secs,
		Enqueued: enq1 - enq0, EnqueuedPerSec: float64(enq1-enq0) / secs, Errors: w.Errors,
		Received: received, ReceivedPerSec: float64(received) / secs, BacklogStart: backlog0, BacklogEnd: backlog1}, nil
}

// pgRows counts the bench table's rows: one per distinct id (the primary
// key).
type pgRows struct{ conn *pgx.Conn }

func (p pgRows) mark(ctx context.Context) (any, error) {
	var n int
	if err := p.conn.QueryRow(ctx, "SELECT count(*) FROM bench").Scan(&n); err != nil {
		return nil, fmt.Errorf("count the receiver's rows: %w", err)
	}
	return n, nil
}

func (pgRows) between(_ context.Context, from, to any) (int, error) {
	return to.(int) - from.(int), nil
}

// mqttArrivals counts what a subscriber to the target's topics received
// (QoS 1: a message may come twice, so ids are counted once).
type mqttArrivals struct{ rec *testcluster.MQTTRecorder }

func (m mqttArrivals) mark(context.Context) (any, error) { return m.rec.Len(), nil }

func (m mqttArrivals) between(_ context.Context, from, to any) (int, error) {
	ids, _ := m.rec.IDs()
	return distinctAfter(ids[:from.(int)], ids[from.(int):to.(int)]), nil
}

// sinkArrivals reads the sink's record after the run: each acknowledged
// request's ids (a batch's X-Scadad-Message-Ids) with its arrival time.
type sinkArrivals struct{ sink *testcluster.Sink }

func (sinkArrivals) mark(context.Context) (any, error) { return time.Now(), nil }

func (s sinkArrivals) between(_ context.Context, from, to any) (int, error) {
	reqs, err := s.sink.Deliveries()
	if err != nil {
		return 0, fmt.Errorf("read the sink's record: %w", err)
	}
	var before, within []string
	for _, d := range reqs {
		ids := []string{d.ID}
		if d.MessageIDs != "" {
			ids = ids[:0]
			for _, e := range strings.Split(d.MessageIDs, ",") {
				id, err := url.QueryUnescape(e)
				if err != nil {
					return 0, fmt.Errorf("sink record %d: %s %q: %w", d.Seq, storeforward.HeaderMessageIDs, d.MessageIDs, err)
				}
				ids = append(ids, id)
			}
		}
		switch {
		case d.Time.Before(from.(time.Time)):
			before = append(before, ids...)
		case d.Time.Before(to.(time.Time)):
			within = append(within, ids...)
		}
	}
	return distinctAfter(before, within), nil
}

// distinctAfter counts the distinct ids of within that are not in before.
func distinctAfter(before, within []string) int {
	seen := make(map[string]bool, len(before)+len(within))
	for _, id := range before {
		seen[id] = true
	}
	n := 0
	for _, id := range within {
		if !seen[id] {
			seen[id] = true
			n++
		}
	}
	return n
}
