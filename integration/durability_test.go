package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testwait"
)

// TestStateRebuiltAfterSitePowerLoss: the FSM's state files are written
// without fsync (the raft log is synced), so after an OS restart a node
// cannot trust its state file. Every node is SIGKILLed and its state
// marked as written by another boot, as a site-wide power loss leaves it;
// each discards its state, rebuilds it from the raft log, and every
// acknowledged message is still delivered.
func TestStateRebuiltAfterSitePowerLoss(t *testing.T) {
	c, sink, active := sfSetupPending(t)
	acked := map[string]bool{}
	for i := range 300 {
		id := fmt.Sprintf("powerloss-%d", i)
		if enqueue(active, "sink", id, []byte(id)) {
			acked[id] = true
		}
	}
	if len(acked) != 300 {
		t.Fatalf("%d of 300 acknowledged", len(acked))
	}
	for _, n := range c.Nodes {
		c.Kill(n)
		marker := filepath.Join(n.Dir, "data", "fsm.db.unsynced")
		if _, err := os.Stat(marker); err != nil {
			t.Fatalf("%s: no unsynced marker after SIGKILL (are commits synced?): %v", n.ID, err)
		}
		if err := os.WriteFile(marker, []byte("a-boot-before-the-power-loss\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	start(t, c)
	waitOneActive(t, c, 30*time.Second)
	for _, n := range c.Nodes {
		testwait.For(t, 10*time.Second, n.ID+" to report its discarded state", func() bool {
			return strings.Contains(n.LogTail(2000), "state file not trusted after an OS restart")
		})

	}
	if err := sink.SetFailing(false); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, sink, acked, 60*time.Second)
}
