//go:build unix

package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testcluster"
)

// The live delivery rate counts, from the sink's record, the distinct ids
// of acknowledged requests that arrived in the window: a batch's ids from
// its X-Scadad-Message-Ids (query-escaped), a single message's from its
// Idempotency-Key; a refused request and an id delivered before the window
// (again inside it) do not count.
func TestSinkArrivalsCountDistinctIDsInTheWindow(t *testing.T) {
	record := filepath.Join(t.TempDir(), "sink.jsonl")
	lines := `{"seq":1,"time":"2026-12-02T09:00:00Z","id":"a","status":200}
{"seq":2,"time":"2026-12-02T09:00:01Z","id":"b","status":200,"message_ids":"b,c%2Cd"}
{"seq":3,"time":"2026-12-02T09:00:01.5Z","id":"x","status":503}
{"seq":4,"time":"2026-12-02T09:00:02Z","id":"a","status":200,"message_ids":"a,e,f"}
{"seq":5,"time":"2026-12-02T09:00:02.5Z","id":"b","status":200,"message_ids":"b,g"}
{"seq":6,"time":"2026-12-02T09:00:03Z","id":"h","status":200}
`
	if err := os.WriteFile(record, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	arr := sinkArrivals{&testcluster.Sink{Record: record}}
	from := time.Date(2026, 12, 2, 9, 0, 1, 0, time.UTC)
	to := time.Date(2026, 12, 2, 9, 0, 3, 0, time.UTC)
	n, err := arr.between(context.Background(), from, to)
	if err != nil {
		t.Fatal(err)
	}
	// b, "c,d", e, f, g: a came before the window, h after, seq 3 refused.
	if n != 5 {
		t.Fatalf("%d distinct ids in the window, want 5 (b, c,d, e, f, g)", n)
	}
}

// The backlog that was pending when the receiver came back is gone once
// as many messages were delivered, whatever the producers enqueued since:
// a FIFO buffer of 1,000 old messages that took 300 new ones is done with
// the old ones at 1,000 delivered (300 pending), not at 999 (301 pending),
// and a buffer that was emptied entirely is done too.
func TestBacklogGoneOnceThePendingAreNoMoreThanTheNewOnes(t *testing.T) {
	const backlog, enqueuedSince = 1000, 300
	for _, tc := range []struct {
		delivered uint64
		want      bool
	}{
		{0, false},
		{999, false},
		{1000, true},
		{1300, true},
	} {
		pending := backlog + enqueuedSince - tc.delivered
		if got := backlogGone(pending, enqueuedSince); got != tc.want {
			t.Errorf("%d delivered of %d old and %d new (%d pending): backlogGone = %v, want %v", tc.delivered, backlog, enqueuedSince, pending, got, tc.want)
		}
	}
	if backlogGone(0, -1) {
		t.Error("a negative count enqueued since (a counter misread) says the backlog is gone")
	}
}
