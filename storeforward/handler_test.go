package storeforward

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/internal/netguard"
	"github.com/scadad/scadad/internal/testwait"
)

func TestHandler(t *testing.T) {
	f := newFSM(t, true)
	p := &applyProposer{f: f}
	e, err := NewEnqueuer(EnqueuerOptions{Proposer: p, Counts: f, Targets: StaticTargets{
		"hist":   {Name: "hist", URL: "http://x", MaxPayloadBytes: 16},
		"ops":    {Name: "ops", URL: "http://y"},
		"capped": {Name: "capped", URL: "http://z", MaxPending: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := &fasthttp.Server{Handler: e.Handler(), MaxRequestBodySize: fsm.MaxPayloadBytes}
	go server.Serve(ln)
	defer server.Shutdown()
	srvURL := "http://" + ln.Addr().String()

	cases := []struct {
		name     string
		method   string
		path     string
		body     string
		headers  map[string]string
		down     bool
		want     int
		wantBody []string // substrings of the answer
	}{
		{"stored", "POST", "/v1/sf/hist", "hello", map[string]string{"Idempotency-Key": "k1", "Content-Type": "text/plain"}, false, 201, []string{`"id":"k1"`, `"duplicate":false`}},
		{"same key again", "POST", "/v1/sf/hist", "hello", map[string]string{"Idempotency-Key": "k1"}, false, 200, []string{`"duplicate":true`}},
		{"generated id", "POST", "/v1/sf/ops", "x", nil, false, 201, []string{`"id":"`}},
		{"unknown target lists targets", "POST", "/v1/sf/nope", "x", nil, false, 404, []string{`"known_targets":["capped","hist","ops"]`, `unknown_target`}},
		{"too large", "POST", "/v1/sf/hist", strings.Repeat("x", 17), nil, false, 413, []string{`"limit":16`}},
		{"wrong method", "GET", "/v1/sf/hist", "", nil, false, 405, []string{"method GET not allowed"}},
		{"no target", "POST", "/v1/sf/", "x", nil, false, 404, []string{`"code":"not_found"`}},
		{"a path below a target", "POST", "/v1/sf/hist/more", "x", nil, false, 404, []string{`"code":"not_found"`}},
		{"compressed body", "POST", "/v1/sf/hist", "x", map[string]string{"Content-Encoding": "gzip"}, false, 415, []string{"Content-Encoding"}},
		{"key too long", "POST", "/v1/sf/ops", "x", map[string]string{"Idempotency-Key": strings.Repeat("k", 600)}, false, 400, []string{"message id"}},
		{"under its max_pending", "POST", "/v1/sf/capped", "x", map[string]string{"Idempotency-Key": "c1"}, false, 201, []string{`"id":"c1"`}},
		{"at its max_pending", "POST", "/v1/sf/capped", "x", map[string]string{"Idempotency-Key": "c2"}, false, 507, []string{`"code":"target_full"`, `"limit":1`, "max_pending is 1"}},
		{"no quorum", "POST", "/v1/sf/ops", "x", map[string]string{"Idempotency-Key": "k2"}, true, 503, []string{"no leader or quorum", "retry with the same Idempotency-Key"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p.down.Store(c.down)
			req, _ := http.NewRequest(c.method, srvURL+c.path, strings.NewReader(c.body))
			for k, v := range c.headers {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.want, body)
			}
			for _, w := range c.wantBody {
				if !strings.Contains(string(body), w) {
					t.Errorf("answer %s lacks %q", body, w)
				}
			}
			if !json.Valid(body) {
				t.Errorf("answer is not JSON: %s", body)
			}
		})
	}
	p.down.Store(false)
	msgs, err := f.SFPending("hist", 0, 10)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("pending %v %v", msgs, err)
	}
	if msgs[0].ID != "k1" || string(msgs[0].Payload) != "hello" || len(msgs[0].Headers) != 1 ||
		msgs[0].Headers[0] != (fsm.Header{Key: "Content-Type", Value: "text/plain"}) {
		t.Fatalf("stored message %+v", msgs[0])
	}
}

// With StreamRequestBody the handler reads a body as it arrives: a client
// that announces a large body and sends little is charged what it sent, a
// body announced over the limit is refused without reading it (past the
// 8 KiB fasthttp reads first), and a body that finds
// the budget full is answered 503 busy.
func TestHandlerBoundsBodiesInFlight(t *testing.T) {
	f := newFSM(t, true)
	budget := netguard.NewBodyBudget(32 << 10)
	e, err := NewEnqueuer(EnqueuerOptions{Proposer: &applyProposer{f: f}, Counts: f, Bodies: budget,
		Targets: StaticTargets{"big": {Name: "big", URL: "http://x", MaxPayloadBytes: 1 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := &fasthttp.Server{Handler: e.Handler(), MaxRequestBodySize: fsm.MaxPayloadBytes, StreamRequestBody: true}
	go server.Serve(ln)
	defer server.Shutdown()
	addr := ln.Addr().String()
	post := func(body string) (int, string) {
		t.Helper()
		resp, err := http.Post("http://"+addr+"/v1/sf/big", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "POST /v1/sf/big HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", 1<<20, strings.Repeat("s", 9000))
	testwait.For(t, 2*time.Second, "the slow body charged", func() bool { return budget.InUse() > 0 })
	if in := budget.InUse(); in > 16<<10 {
		t.Fatalf("%d bytes charged for a body announced at 1 MiB of which 9,000 bytes arrived", in)
	}
	if code, body := post(strings.Repeat("b", 20<<10)); code != 503 || !strings.Contains(body, `"code":"busy"`) {
		t.Fatalf("a body with the budget nearly full: %d %s, want 503 busy", code, body)
	}

	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	// fasthttp reads the first 8 KiB of a body before the handler runs.
	fmt.Fprintf(over, "POST /v1/sf/big HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", 2<<20, strings.Repeat("o", 8<<10))
	over.SetReadDeadline(time.Now().Add(2 * time.Second))
	answer, _ := io.ReadAll(over) // the server closes after answering
	if !strings.HasPrefix(string(answer), "HTTP/1.1 413") || !strings.Contains(string(answer), `"limit":1048576`) {
		t.Fatalf("a body announced over the limit, 8 KiB of it sent: %q, want 413 at once", answer)
	}

	slow.Close()
	testwait.For(t, 2*time.Second, "the slow body's bytes given back", func() bool { return budget.InUse() == 0 })
	if code, body := post(strings.Repeat("b", 20<<10)); code != 201 {
		t.Fatalf("a 20 KiB body with the budget free: %d %s", code, body)
	}
	if in := budget.InUse(); in != 0 {
		t.Fatalf("%d bytes still charged after the answer", in)
	}
}
