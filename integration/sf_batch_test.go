//go:build linux

package integration

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/storeforward"
)

// 5,000 messages to an HTTP target with batches (batch_max_messages 50,
// batch_max_bytes 600) across a SIGKILL of the Active: every batch holds
// at most 50 messages and 600 bytes of payload, its ids are in its body
// and, in the same order, in X-Scadad-Message-Ids; every acknowledged id
// arrives; each producer's messages first arrive in the order they were
// acknowledged (max_in_flight 1); a backlog goes out in batches cut by
// the byte bound.
func TestSFHTTPBatchesAcrossSIGKILL(t *testing.T) {
	sink := startSink(t, "-bodies")
	c, active, targets := sfTargetCluster(t, "sf-batch", fmt.Sprintf(
		"{name: hist, url: %q, timeout: 5s, backoff_floor: 20ms, backoff_max: 500ms, max_payload_bytes: 65536, max_in_flight: 1, batch_max_messages: 50, batch_max_bytes: 600}", sink.URL))
	if len(targets) != 1 || targets[0].BatchMaxMessages != 50 {
		t.Fatalf("sf targets: %+v", targets)
	}
	const producers, per = 10, 500
	var acked atomic.Int64
	wait := produce(c, "hist", "bt", producers, per, &acked)
	testwait.For(t, 60*time.Second, "1,500 acknowledged", func() bool { return acked.Load() >= 1500 })
	c.Kill(active)
	t.Logf("SIGKILL of the Active at %d acknowledged", acked.Load())
	// A backlog (the receiver failing for a while) goes out in full
	// batches, cut by batch_max_bytes before batch_max_messages.
	if err := sink.SetFailing(true); err != nil {
		t.Fatal(err)
	}
	from := acked.Load()
	testwait.For(t, 60*time.Second, "500 acknowledged while the receiver fails", func() bool { return acked.Load() >= from+500 })
	if err := sink.SetFailing(false); err != nil {
		t.Fatal(err)
	}
	wait()

	counts := map[string]int{}
	var batches, multi, most int
	testwait.ForDetail(t, 120*time.Second, "every id delivered", func() (bool, string) {
		ds, err := sink.Deliveries()
		if err != nil {
			t.Fatal(err)
		}
		clear(counts)
		batches, multi, most = 0, 0, 0
		last := map[string]string{}
		for _, d := range ds {
			if d.Status/100 != 2 {
				continue
			}
			var items []storeforward.BatchItem
			if err := json.Unmarshal(d.Body, &items); err != nil {
				t.Fatalf("delivery %s: body is not a batch: %v", d.ID, err)
			}
			header := strings.Split(d.MessageIDs, ",")
			if len(items) == 0 || len(items) > 50 || len(header) != len(items) || !strings.HasPrefix(d.ID, "batch-") {
				t.Fatalf("delivery %s: %d items, %d ids in the header", d.ID, len(items), len(header))
			}
			size := 0
			for i, it := range items {
				if id, err := url.QueryUnescape(header[i]); err != nil || id != it.ID {
					t.Fatalf("delivery %s: header id %d is %q, body id %q", d.ID, i, header[i], it.ID)
				}
				size += len(it.Payload)
				counts[it.ID]++
				producer := it.ID[:strings.LastIndex(it.ID, "-")]
				if counts[it.ID] == 1 {
					if prev, ok := last[producer]; ok && prev > it.ID {
						t.Fatalf("%s first arrived after %s (FIFO broken)", it.ID, prev)
					}
					last[producer] = it.ID
				}
			}
			if size > 600 && len(items) > 1 {
				t.Fatalf("delivery %s: %d payload bytes in %d messages, over batch_max_bytes 600", d.ID, size, len(items))
			}
			batches++
			most = max(most, len(items))
			if len(items) > 1 {
				multi++
			}
		}
		return len(counts) >= producers*per, fmt.Sprintf("%d distinct ids in %d batches", len(counts), batches)
	})
	for w := 0; w < producers; w++ {
		for i := 0; i < per; i++ {
			if id := fmt.Sprintf("bt-%02d-%05d", w, i); counts[id] == 0 {
				t.Fatalf("%s acknowledged, never delivered", id)
			}
		}
	}
	// About 22 bytes a payload: 600 bytes hold 27 of them.
	if most < 20 {
		t.Fatalf("the largest batch held %d messages: the backlog was not sent in full batches", most)
	}
	t.Logf("%d ids in %d batches (%d of several messages, the largest %d)", len(counts), batches, multi, most)
}
