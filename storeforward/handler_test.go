package storeforward

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/scadad/scadad/fsm"
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
