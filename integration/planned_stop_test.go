package integration

import (
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// TestPairPlannedStopOfTheActiveKeepsAnActive: SIGTERM of the Active in a
// bare pair hands over and leaves the voters first, so the survivor is
// Active as sole voter long before override_after (10 s here), and the
// stopped node, started again, is re-admitted as Standby of two voters.
func TestPairPlannedStopOfTheActiveKeepsAnActive(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "pair", Voters: 2, OverrideAfter: 10 * time.Second, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 30*time.Second)
	survivor := otherVoter(t, c, active)
	waitRole(t, c, survivor, "standby", 20*time.Second)

	stopGaps := make(chan struct{})
	gaps := activeGaps(c, stopGaps)
	stopped := make(chan time.Time, 1)
	go func() { c.Stop(active); stopped <- time.Now() }()
	begin := time.Now()
	testwait.For(t, 5*time.Second, survivor.ID+" Active before override_after", func() bool {
		as := c.Actives()
		return len(as) == 1 && as[0] == survivor
	})
	t.Logf("survivor Active %v after the SIGTERM", time.Since(begin))
	<-stopped
	// It stays Active: well past a leader lease and an election timeout
	// after the stop, which a leader of two voters without its peer would
	// not survive.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if as := c.Actives(); len(as) != 1 || as[0] != survivor {
			t.Fatalf("%v after the stop the Active nodes are %v, want %s", time.Since(begin), ids(as), survivor.ID)
		}
	}
	close(stopGaps)
	t.Logf("spans without an Active around the planned stop (sampled every 20 ms): %v", gaps())
	st, err := nodeStatus(survivor, c)
	if err != nil || st.Voters != 1 {
		t.Fatalf("survivor: voters %d, %v; want sole voter", st.GetVoters(), err)
	}

	start(t, c, active)
	testwait.ForDetail(t, 30*time.Second, active.ID+" back as Standby of two voters", func() (bool, string) {
		st, err := nodeStatus(active, c)
		if err != nil {
			return false, err.Error()
		}
		return st.Role == "standby" && st.Voters == 2, st.Role
	})
	if as := c.Actives(); len(as) != 1 || as[0] != survivor {
		t.Fatalf("Active after the return: %v, want only %s", ids(as), survivor.ID)
	}

	// A planned stop of the Standby leaves the voters too: the Active
	// keeps its quorum as sole voter.
	c.Stop(active)
	stayActive(t, c, survivor, 3*time.Second)
	if st, err := nodeStatus(survivor, c); err != nil || st.Voters != 1 {
		t.Fatalf("after the Standby's stop: voters %d, %v; want sole voter", st.GetVoters(), err)
	}
	start(t, c, active)
	waitRole(t, c, active, "standby", 30*time.Second)
}

// stayActive fails unless n is the only Active node throughout d.
func stayActive(t *testing.T, c *testcluster.Cluster, n *testcluster.Node, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if as := c.Actives(); len(as) != 1 || as[0] != n {
			t.Fatalf("the Active nodes are %v, want %s", ids(as), n.ID)
		}
	}
}
