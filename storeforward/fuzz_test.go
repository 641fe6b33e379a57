package storeforward

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"

	"github.com/valyala/fasthttp"
)

// FuzzEnqueueRequest feeds raw HTTP requests (as a producer's bytes reach
// the listener) through fasthttp's request parser and the enqueue handler:
// nothing may panic, every answer is JSON with a status the endpoint
// documents, and a stored message (201) is what the body said.
// Run: go test ./storeforward -run '^$' -fuzz FuzzEnqueueRequest -fuzztime 30s
func FuzzEnqueueRequest(f *testing.F) {
	for _, seed := range []string{
		"POST /v1/sf/hist HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k1\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
		"POST /v1/sf/ops HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx",
		"GET /v1/sf/hist HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/sf/hist/more HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
		"POST /v1/sf/hist HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: 1\r\n\r\nx",
		"POST /v1/sf/capped HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"POST /v1/sf/%2e%2e HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	fs := newFSM(f, true)
	e, err := NewEnqueuer(EnqueuerOptions{Proposer: &applyProposer{f: fs}, Counts: fs, Targets: StaticTargets{
		"hist":   {Name: "hist", URL: "http://x", MaxPayloadBytes: 16},
		"ops":    {Name: "ops", URL: "http://y"},
		"capped": {Name: "capped", URL: "http://z", MaxPending: 1},
	}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	handler := e.Handler()
	documented := map[int]bool{200: true, 201: true, 400: true, 404: true, 405: true, 413: true, 415: true, 503: true, 507: true}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var req fasthttp.Request
		if err := req.ReadLimitBody(bufio.NewReader(bytes.NewReader(raw)), 1<<20); err != nil {
			return // the server answers 400 itself
		}
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, nil, nil)
		handler(&ctx)
		status := ctx.Response.StatusCode()
		if !documented[status] {
			t.Fatalf("status %d for %q: %s", status, raw, ctx.Response.Body())
		}
		var answer map[string]any
		if err := json.Unmarshal(ctx.Response.Body(), &answer); err != nil {
			t.Fatalf("answer is not JSON (%v): %q", err, ctx.Response.Body())
		}
		if status == 201 {
			id, _ := answer["id"].(string)
			if id == "" {
				t.Fatalf("stored without an id: %s", ctx.Response.Body())
			}
		}
	})
}
