package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/internal/testcluster"
)

// A body over the largest a target may take is refused 413 with the
// documented JSON refusal through scadad's own HTTP listener, announced
// (Content-Length) or not (chunked), and the node keeps serving: before,
// fasthttp's own check answered "400 Error when parsing request".
func TestHTTPEnqueueOverTheLimitIs413(t *testing.T) {
	sink := startSink(t)
	c := newCluster(t, testcluster.Options{Mode: "strict", Voters: 1})
	start(t, c)
	n := waitOneActive(t, c, 20*time.Second)
	deploySite(t, c, testcluster.SiteConfig("big", map[string]string{"hist": sink.URL}, 0))

	over := bytes.Repeat([]byte("x"), fsm.MaxPayloadBytes+1)
	// A raw connection: the node answers before it has read the body and
	// closes, and net/http's client reports the reset of its write instead
	// of the answer.
	post := func(header string, body []byte) (int, string) {
		t.Helper()
		conn, err := net.DialTimeout("tcp", n.HTTPAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(conn, header); err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = conn.Write(body) }() // ends with the connection
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("read the answer: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	head := "POST /v1/sf/hist HTTP/1.1\r\nHost: scadad\r\nIdempotency-Key: big\r\n"
	chunked := fmt.Appendf(nil, "%x\r\n%s\r\n0\r\n\r\n", len(over), over)
	for _, tc := range []struct {
		name   string
		header string
		body   []byte
	}{
		{"announced", head + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(over)), over},
		{"chunked", head + "Transfer-Encoding: chunked\r\n\r\n", chunked},
	} {
		code, body := post(tc.header, tc.body)
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, `"payload_too_large"`) {
			t.Errorf("%s body of %d bytes: %d %.200s, want 413 payload_too_large", tc.name, len(over), code, body)
		}
	}
	small := head + "Content-Length: 7\r\n\r\n"
	if code, body := post(small, []byte(`{"v":1}`)); code >= 300 {
		t.Fatalf("a small enqueue after the refusals: %d %s", code, body)
	}
}
