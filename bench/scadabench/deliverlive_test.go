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
