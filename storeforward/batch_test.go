package storeforward

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/role"
)

// batchItems decodes a batched request body.
func batchItems(t *testing.T, r received, format string) []BatchItem {
	t.Helper()
	var items []BatchItem
	if format == BatchNDJSON {
		sc := bufio.NewScanner(strings.NewReader(r.Body))
		for sc.Scan() {
			var it BatchItem
			if err := json.Unmarshal(sc.Bytes(), &it); err != nil {
				t.Fatalf("ndjson line %q: %v", sc.Text(), err)
			}
			items = append(items, it)
		}
		return items
	}
	if err := json.Unmarshal([]byte(r.Body), &items); err != nil {
		t.Fatalf("json body %q: %v", r.Body, err)
	}
	return items
}

func TestBatchedHTTPDeliveryCarriesEveryIDInOrder(t *testing.T) {
	for _, format := range []string{BatchJSON, BatchNDJSON} {
		t.Run(format, func(t *testing.T) {
			h := newHarness(t, role.State{Role: role.Standby})
			s := newSink(t, h.roles, nil)
			tg := fastTarget("up", s.srv.URL)
			tg.BatchMaxMessages, tg.BatchFormat = 10, format
			if err := h.d.SetTargets([]Target{tg}); err != nil {
				t.Fatal(err)
			}
			var want []string
			for i := 0; i < 25; i++ {
				id := fmt.Sprintf("m,%02d", i) // a comma in an id must not split it
				payload := fmt.Sprintf(`{"n":%d}`, i)
				if i%2 == 1 {
					payload = fmt.Sprintf("raw %d\n", i) // not JSON: base64
				}
				h.enqueue(t, "up", id, payload)
				want = append(want, id)
			}
			h.roles.Publish(activeState(1, 1))
			testwait.For(t, 10*time.Second, "all delivered", func() bool { return h.stats(t, "up").Delivered == 25 })
			reqs := s.requests()
			if len(reqs) != 3 {
				t.Fatalf("%d requests for 25 messages in batches of 10", len(reqs))
			}
			var got []string
			for _, r := range reqs {
				items := batchItems(t, r, format)
				var hdr []string
				for _, enc := range strings.Split(r.Headers.Get(HeaderMessageIDs), ",") {
					id, err := url.QueryUnescape(enc)
					if err != nil {
						t.Fatal(err)
					}
					hdr = append(hdr, id)
				}
				if len(hdr) != len(items) || !strings.HasPrefix(r.ID, "batch-") {
					t.Fatalf("header ids %v for %d items, key %q", hdr, len(items), r.ID)
				}
				for i, it := range items {
					if it.ID != hdr[i] {
						t.Fatalf("body id %s, header id %s", it.ID, hdr[i])
					}
					got = append(got, it.ID)
				}
				wantCT := map[string]string{BatchJSON: "application/json", BatchNDJSON: "application/x-ndjson"}[format]
				if ct := r.Headers.Get("Content-Type"); ct != wantCT {
					t.Fatalf("Content-Type %q, want %q", ct, wantCT)
				}
			}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("delivered order %v", got)
			}
			first := batchItems(t, reqs[0], format)
			if string(first[0].Payload) != `{"n":0}` || first[1].PayloadBase64 == "" || len(first[1].Payload) != 0 {
				t.Fatalf("payloads %+v", first[:2])
			}
		})
	}
}

func TestBatchMaxBytesBoundsABatch(t *testing.T) {
	h := newHarness(t, role.State{Role: role.Standby})
	s := newSink(t, h.roles, nil)
	tg := fastTarget("up", s.srv.URL)
	tg.BatchMaxMessages, tg.BatchMaxBytes = 100, 350
	if err := h.d.SetTargets([]Target{tg}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 7; i++ {
		h.enqueue(t, "up", fmt.Sprint("m", i), fmt.Sprintf(`"%s"`, strings.Repeat("x", 98))) // 100 bytes
	}
	h.roles.Publish(activeState(1, 1))
	testwait.For(t, 10*time.Second, "all delivered", func() bool { return h.stats(t, "up").Delivered == 7 })
	var sizes []int
	for _, r := range s.requests() {
		sizes = append(sizes, len(batchItems(t, r, BatchJSON)))
	}
	if fmt.Sprint(sizes) != "[3 3 1]" {
		t.Fatalf("batch sizes %v, want [3 3 1] (350 bytes hold three 100-byte payloads)", sizes)
	}
}

func TestRefusedBatchIsSplitSoOnlyThePoisonMessageParks(t *testing.T) {
	h := newHarness(t, role.State{Role: role.Standby})
	s := newSink(t, h.roles, func(r received, n int) int {
		if strings.Contains(r.Body, "poison") {
			return http.StatusUnprocessableEntity
		}
		return http.StatusOK
	})
	tg := fastTarget("up", s.srv.URL)
	tg.BatchMaxMessages = 10
	if err := h.d.SetTargets([]Target{tg}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		body := fmt.Sprintf(`{"n":%d}`, i)
		if i == 2 {
			body = `{"poison":true}`
		}
		h.enqueue(t, "up", fmt.Sprint("m", i), body)
	}
	h.roles.Publish(activeState(1, 1))
	testwait.For(t, 10*time.Second, "drained", func() bool {
		st := h.stats(t, "up")
		return st.Pending == 0 && st.Parked == 1 && st.Delivered == 5
	})
	parked, _ := h.op.List("up", true, 10)
	if len(parked) != 1 || parked[0].ID != "m2" || !strings.Contains(parked[0].ParkReason, "422") || parked[0].Attempts != 2 {
		t.Fatalf("parked %+v; want m2 alone after the batch and its own attempt", parked)
	}
	// One refused batch, then one message at a time in order.
	var seq []string
	for _, r := range s.requests()[1:] {
		for _, it := range batchItems(t, r, BatchJSON) {
			seq = append(seq, it.ID)
		}
	}
	if strings.Join(seq, ",") != "m0,m1,m2,m3,m4,m5" {
		t.Fatalf("after the refused batch: %v", seq)
	}
}

func TestUnknownKindIsRefusedNamingTheKnown(t *testing.T) {
	h := newHarness(t, role.State{Role: role.Standby})
	err := h.d.SetTargets([]Target{{Name: "k", Kind: "kafka"}})
	if err == nil || !strings.Contains(err.Error(), `unknown kind "kafka" (known: http)`) {
		t.Fatalf("SetTargets with kind kafka: %v", err)
	}
}
