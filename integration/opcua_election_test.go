package integration

import (
	"strconv"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// TestSurvivorKeepsItsServiceLevelThroughTheElection: after a SIGKILL of
// the Active, the healthy Standby goes through an election before it
// leads. ServiceLevel 0 means "not operational" and sends clients away
// from the very server they should move to, so the survivor must not
// publish anything below 200 on its way from 240 to 250 (issue 22, defect
// 3). Every level a node publishes is counted by
// scadad_opcua_service_level_changes_total{level}, so a 0 of a few
// milliseconds shows too; three failovers.
func TestSurvivorKeepsItsServiceLevelThroughTheElection(t *testing.T) {
	sim, c, active, standby := opcuaPair(t, "-change", "100ms")
	deploySite(t, c, testcluster.SiteConfigGateway("election", sim.Addr, map[string]string{"sink": "http://127.0.0.1:9/x"}, 5))
	for round := 1; round <= 3; round++ {
		waitRedundancyLevels(t, active, standby, "")
		low := func() (n int) {
			for _, lvl := range []string{"0", "100"} {
				v, _ := strconv.ParseFloat(metricLine(standby, `scadad_opcua_service_level_changes_total{level="`+lvl+`"}`), 64)
				n += int(v)
			}
			return n
		}
		before := low()
		killed := time.Now()
		c.Kill(active)
		testwait.For(t, 15*time.Second, "the survivor's ServiceLevel 250", func() bool { return serviceLevel(standby.OPCUA) == 250 })
		t.Logf("round %d: survivor at 250 %s after the SIGKILL", round, time.Since(killed).Round(time.Millisecond))
		if after := low(); after != before {
			t.Fatalf("round %d: the survivor published a ServiceLevel below 200 %d time(s) during the election", round, after-before)
		}
		start(t, c, active)
		active, standby = standby, active
	}
}
