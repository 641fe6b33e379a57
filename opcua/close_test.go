package opcua

import (
	"testing"
	"time"
)

// A client that stays connected does not hold a stopping server up: the
// library waits up to 10 s for every connection to end, and a client that
// keeps its session (a redundancy-aware one keeps sessions to both nodes)
// never ends it. Close bounds that wait (closeLibraryWait); the process is
// exiting or the node's OPC UA server is being replaced.
func TestCloseIsNotHeldByAConnectedClient(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	c := connect(t, ts.Endpoint())
	readValue(t, c, ts.NodeID("Pump1", "Speed"), 13) // a live session
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- ts.Close() }()
	select {
	case <-done:
	case <-time.After(closeLibraryWait + 5*time.Second):
		t.Fatalf("Close still waiting after %v with a client connected (the library's own wait is 10 s)", time.Since(start).Round(time.Millisecond))
	}
	t.Logf("Close took %v with a client connected", time.Since(start).Round(time.Millisecond))
}
