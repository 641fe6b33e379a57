package integration

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
)

// TestNoQuorumAnswersUnavailableFast: with the Standby and the witness
// gone, the former Active has no quorum. An enqueue over HTTP, over the
// control API with a long deadline, and scadactl --timeout 2s sf enqueue
// must each answer Unavailable (503) soon — about two election timeouts,
// 1 s here — not after a fixed 10 s or the caller's whole deadline. The
// bound asserted is loose (the numbers are benchmark targets).
func TestNoQuorumAnswersUnavailableFast(t *testing.T) {
	c, _ := sfSetup(t, 1000)
	active := waitOneActive(t, c, 10*time.Second)
	for _, n := range c.Nodes {
		if n != active {
			c.Kill(n)
		}
	}
	const bound = 6 * time.Second

	client := &http.Client{Timeout: 20 * time.Second}
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, "http://"+active.HTTPAddr+"/v1/sf/sink", bytes.NewReader([]byte("x")))
	req.Header.Set("Idempotency-Key", "no-quorum-http")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("HTTP enqueue without a quorum: %v after %v", err, time.Since(start))
	}
	resp.Body.Close()
	httpTook := time.Since(start)
	if resp.StatusCode != http.StatusServiceUnavailable || httpTook > bound {
		t.Fatalf("HTTP enqueue without a quorum: %d after %v, want 503 within %v", resp.StatusCode, httpTook, bound)
	}

	cli := nodeClient(t, c, "operator", active)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start = time.Now()
	_, err = cli.SFEnqueue(ctx, &controlpb.SFEnqueueRequest{Target: "sink", Payload: []byte("x"), Id: "no-quorum-grpc"})
	grpcTook := time.Since(start)
	if grpcstatus.Code(err) != codes.Unavailable || grpcTook > bound {
		t.Fatalf("control API enqueue without a quorum (20 s deadline): %v after %v, want Unavailable within %v", err, grpcTook, bound)
	}

	start = time.Now()
	_, stderr, code, _ := c.Ctl(ctx, []*testcluster.Node{active}, "--timeout", "2s", "sf", "enqueue", "sink", "--data", "x", "--id", "no-quorum-ctl")
	ctlTook := time.Since(start)
	if code == 0 || ctlTook > 4*time.Second || !strings.Contains(stderr, "Unavailable") {
		t.Fatalf("scadactl --timeout 2s sf enqueue without a quorum: exit %d after %v: %s; want Unavailable within the 2 s", code, ctlTook, stderr)
	}
	t.Logf("without a quorum: HTTP 503 after %v, control API Unavailable after %v, scadactl after %v", httpTook.Round(time.Millisecond), grpcTook.Round(time.Millisecond), ctlTook.Round(time.Millisecond))
}
