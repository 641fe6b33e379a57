package integration

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// TestMappedStatePagesLeaveTheResidentSize: bbolt reads its files through
// memory maps, and every page it touches would stay in the process's
// resident size. After a fill of about 24 MB of pending messages, every
// node's resident pages of fsm.db and raft.db must fall to a few MB within
// seconds (scadad hands them back to the kernel as its commits and raft's
// log traffic go, and every 5 s).
func TestMappedStatePagesLeaveTheResidentSize(t *testing.T) {
	c, _, active := sfSetupPending(t)
	payload := bytes.Repeat([]byte("m"), 4<<10)
	var acked atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 375; i++ {
				if enqueue(active, "sink", fmt.Sprintf("mem-%d-%d", w, i), payload) {
					acked.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if acked.Load() != 6000 {
		t.Fatalf("%d of 6000 acknowledged", acked.Load())
	}
	const limitKB = 6 << 10
	bbolt := func(n *testcluster.Node) int {
		files := n.ResidentFilesKB()
		return files["fsm.db"] + files["raft.db"]
	}
	for _, n := range c.Nodes {
		testwait.For(t, 10*time.Second, fmt.Sprintf("%s's resident bbolt pages under %d kB", n.ID, limitKB), func() bool {
			return bbolt(n) < limitKB
		})

	}
	t.Logf("resident bbolt pages per node after the fill: %d %d %d kB", bbolt(c.Nodes[0]), bbolt(c.Nodes[1]), bbolt(c.Nodes[2]))
}
