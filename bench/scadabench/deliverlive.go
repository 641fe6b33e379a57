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
	// BacklogFilled is -deliver-backlog's: the messages enqueued while the
	// receiver was down, before it came up and the producers started.
	BacklogFilled int `json:"backlog_filled,omitempty"`
	// BacklogGoneSeconds is the time from the receiver's return until
	// every message pending then was delivered; 0 when that took longer
	// than -deliver-backlog-max.
	BacklogGoneSeconds float64 `json:"backlog_gone_s,omitempty"`
	// WindowCutShort: the backlog was gone before -deliver-window ended,
	// and the window ended there (after it, delivery can only follow the
	// enqueue rate).
	WindowCutShort bool `json:"window_cut_short,omitempty"`
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
// left it so: -deliver-mode live runs this phase alone), or, with
// -deliver-backlog N, a plant's return from an outage: N messages are
// enqueued while the receiver is down, then it comes up as the producers
// start, and the window measures delivery while the backlog is worked off.
func (b *bench) deliverLivePhase(producers, size int) (*deliverLiveResult, error) {
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
	res := &deliverLiveResult{Kind: b.o.deliverKind, Producers: producers, ValueBytes: size}
	if b.o.deliverBacklog > 0 {
		stopReceiver, err := b.fillBacklog(conns, size, res)
		if err != nil {
			return nil, err
		}
		defer stopReceiver()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	arr, closeArrivals, err := b.arrivals(ctx)
	if err != nil {
		return nil, err
	}
	defer closeArrivals()
	if b.o.deliverBacklog == 0 {
		// What setup enqueued is delivered first: the window starts from
		// an empty buffer.
		if err := testwait.Poll(ctx, func() bool {
			p, err := b.pending(ctx)
			return err == nil && p == 0
		}); err != nil {
			return nil, fmt.Errorf("drain the setup's messages: %w", err)
		}
	}
	var acked atomic.Int64
	done := make(chan writeResult, 1)
	up := time.Now()
	go func() {
		done <- runLoad(conns, producers, size, b.o.deliverWarmup+b.o.deliverWindow, 0, seqIDs(fmt.Sprintf("live%d", time.Now().UnixNano())), &acked)
	}()
	// gone gets the time from up until the backlog was delivered; without
	// a backlog it is never ready.
	var gone <-chan time.Duration
	watchCtx, stopWatching := context.WithDeadline(ctx, up.Add(b.o.deliverBacklogMax))
	defer stopWatching()
	if b.o.deliverBacklog > 0 {
		gone = b.watchBacklog(watchCtx, up, &acked)
	}
	snapshot := func() (enq int64, backlog uint64, at any, err error) {
		enq = acked.Load()
		if backlog, err = b.pending(ctx); err != nil {
			return 0, 0, nil, err
		}
		at, err = arr.mark(ctx)
		return enq, backlog, at, err
	}
	warmup := time.NewTimer(b.o.deliverWarmup)
	defer warmup.Stop()
	select {
	case <-warmup.C:
	case d := <-gone:
		return nil, fmt.Errorf("the backlog of %d messages was delivered %.1fs after the receiver came up, before the window began: fill more (-deliver-backlog) or warm up less (-deliver-warmup)", res.BacklogFilled, d.Seconds())
	}
	t0 := time.Now()
	enq0, backlog0, mark0, err := snapshot()
	if err != nil {
		return nil, err
	}
	stop := b.profile("deliver-live", b.o.deliverWindow)
	window := time.NewTimer(time.Until(t0.Add(b.o.deliverWindow)))
	defer window.Stop()
	select {
	case <-window.C:
	case d := <-gone:
		res.BacklogGoneSeconds, res.WindowCutShort = d.Seconds(), true
	}
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
	if b.o.deliverBacklog > 0 && !res.WindowCutShort {
		select {
		case d := <-gone:
			res.BacklogGoneSeconds = d.Seconds()
		case <-watchCtx.Done():
		}
	}
	res.WindowSeconds, res.Errors = secs, w.Errors
	res.Enqueued, res.EnqueuedPerSec = enq1-enq0, float64(enq1-enq0)/secs
	res.Received, res.ReceivedPerSec = received, float64(received)/secs
	res.BacklogStart, res.BacklogEnd = backlog0, backlog1
	return res, nil
}

// fillBacklog enqueues -deliver-backlog messages over conns while the
// receiver refuses (setup left it so), as long as that takes, and brings
// the receiver up once they are all pending; the returned func stops it.
func (b *bench) fillBacklog(conns []*multi, size int, res *deliverLiveResult) (stopReceiver func(), err error) {
	w := runLoad(conns, len(conns), size, 0, b.o.deliverBacklog, seqIDs(fmt.Sprintf("backlog%d", time.Now().UnixNano())), nil)
	res.BacklogFilled = w.Puts
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := testwait.Poll(ctx, func() bool {
		p, err := b.pending(ctx)
		return err == nil && p >= uint64(w.Puts)
	}); err != nil {
		return nil, fmt.Errorf("wait for the %d messages of the backlog to be pending: %w", w.Puts, err)
	}
	return b.startReceiver()
}

// arrivals opens the count of what the target's receiver got; the
// returned func closes it.
func (b *bench) arrivals(ctx context.Context) (arrivals, func(), error) {
	switch {
	case b.pg != nil:
		conn, err := b.pg.Connect(ctx)
		if err != nil {
			return nil, nil, err
		}
		return pgRows{conn}, func() { conn.Close(context.Background()) }, nil
	case b.mq != nil:
		rec, err := b.mq.Subscribe("scadabench-receiver", "bench/#")
		if err != nil {
			return nil, nil, err
		}
		return mqttArrivals{rec}, func() { rec.Close() }, nil
	}
	return sinkArrivals{b.sink}, func() {}, nil
}

// watchBacklog polls the buffer until the messages pending at up have
// all been delivered (backlogGone), and then sends the time since up; it
// sends nothing if ctx ends first. The pending count drops once a
// delivery's acknowledgement is committed, a moment after the receiver
// got it: the backlog is seen gone that much late.
func (b *bench) watchBacklog(ctx context.Context, up time.Time, enqueuedSinceUp *atomic.Int64) <-chan time.Duration {
	gone := make(chan time.Duration, 1)
	go func() {
		if testwait.Poll(ctx, func() bool {
			// Enqueued is read first: counted before the pending count, it
			// can only be too small, and the backlog seen gone late.
			enqueued := enqueuedSinceUp.Load()
			pending, err := b.pending(ctx)
			return err == nil && backlogGone(pending, enqueued)
		}) == nil {
			gone <- time.Since(up)
		}
	}()
	return gone
}

// backlogGone reports whether the messages pending when the receiver came
// back have all been delivered, given what is pending now and what was
// enqueued since. The buffer delivers in enqueue order, so they go before
// any of the new ones: pending now = backlog + enqueued - delivered, which
// is at most enqueued once delivered reaches the backlog (with
// max_in_flight above 1, give or take the deliveries in flight).
func backlogGone(pending uint64, enqueuedSince int64) bool {
	return enqueuedSince >= 0 && pending <= uint64(enqueuedSince)
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
// (QoS 1: a message may come twice, so ids are counted once): the
// message-id property, or with MQTT 3.1.1 the topic, which ends in it.
type mqttArrivals struct{ rec *testcluster.MQTTRecorder }

func (m mqttArrivals) mark(context.Context) (any, error) { return m.rec.Len(), nil }

func (m mqttArrivals) between(_ context.Context, from, to any) (int, error) {
	ids, topics := m.rec.IDs()
	for i, id := range ids {
		if id == "" {
			ids[i] = topics[i]
		}
	}
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
