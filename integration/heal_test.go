//go:build unix

package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// healPair starts a pair whose node-to-node links can be cut, a recording
// sink and a site config with target "sink".
func healPair(t *testing.T) (*testcluster.Cluster, *testcluster.Links, *testcluster.Sink) {
	t.Helper()
	c := newCluster(t, testcluster.Options{Mode: "pair", Voters: 2, OverrideAfter: 2 * time.Second, LogLevel: "info"})
	links, err := c.InsertLinks()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(links.Close)
	start(t, c)
	waitOneActive(t, c, 30*time.Second)
	sink := startSink(t)
	deploySite(t, c, testcluster.SiteConfig("heal-test", map[string]string{"sink": sink.URL}, 1000))
	return c, links, sink
}

func nodeStatus(n *testcluster.Node, c *testcluster.Cluster) (*controlpb.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var st controlpb.StatusResponse
	err := c.CtlJSON(ctx, []*testcluster.Node{n}, &st, "status")
	return &st, err
}

// enqueueAll enqueues ids on n; every one must be acknowledged.
func enqueueAll(t *testing.T, n *testcluster.Node, ids []string, payload []byte) {
	t.Helper()
	for _, id := range ids {
		ok := false
		for attempt := 0; attempt < 20 && !ok; attempt++ {
			if ok = enqueue(n, "sink", id, payload); !ok {
				time.Sleep(100 * time.Millisecond)
			}
		}
		if !ok {
			t.Fatalf("%s did not acknowledge %s", n.ID, id)
		}
	}
}

func seqIDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// waitDualActive cuts the links and waits until both nodes are Active.
func waitDualActive(t *testing.T, c *testcluster.Cluster, links *testcluster.Links) {
	t.Helper()
	links.Cut(true)
	testwait.For(t, 30*time.Second, "both nodes Active (dual-active)", func() bool { return len(c.Actives()) == 2 })
}

// waitHealed waits for one Active and two voters on both nodes and
// returns the winner, the loser and how long it took.
func waitHealed(t *testing.T, c *testcluster.Cluster, timeout time.Duration) (winner, loser *testcluster.Node, took time.Duration) {
	t.Helper()
	start := time.Now()
	testwait.For(t, timeout, "one Active, one Standby, two voters", func() bool {
		winner, loser = nil, nil
		for _, n := range c.Nodes {
			st, err := nodeStatus(n, c)
			if err != nil || st.Voters != 2 {
				return false
			}
			switch st.Role {
			case "active":
				winner = n
			case "standby":
				loser = n
			}
		}
		return winner != nil && loser != nil
	})

	return winner, loser, time.Since(start)
}

// checkDelivered is waitDelivered for a list of ids.
func checkDelivered(t *testing.T, sink *testcluster.Sink, want []string, timeout time.Duration) map[string]int {
	t.Helper()
	acked := make(map[string]bool, len(want))
	for _, id := range want {
		acked[id] = true
	}
	return waitDelivered(t, sink, acked, timeout)
}

func healMessages() int {
	if v, err := strconv.Atoi(os.Getenv("HEAL_MESSAGES")); err == nil && v > 0 {
		return v
	}
	return 200
}

// splitWithWork runs the common scenario up to the restored link: messages
// pending before the split (delivered by both sides during it), messages
// enqueued and delivered on each side during the split, and messages left
// pending on each side when the link comes back. It returns every
// acknowledged id and the pre-split ids (the only ones allowed twice).
func splitWithWork(t *testing.T, c *testcluster.Cluster, links *testcluster.Links, sink *testcluster.Sink) (all, preSplit []string) {
	t.Helper()
	a, b := c.Nodes[0], c.Nodes[1]
	if err := sink.SetFailing(true); err != nil {
		t.Fatal(err)
	}
	active := waitOneActive(t, c, 10*time.Second)
	preSplit = seqIDs("pre", 20)
	enqueueAll(t, active, preSplit, []byte("pre"))
	waitDualActive(t, c, links)
	if err := sink.SetFailing(false); err != nil {
		t.Fatal(err)
	}
	aDone, bDone := seqIDs("a-split", 20), seqIDs("b-split", 20)
	enqueueAll(t, a, aDone, []byte("a"))
	enqueueAll(t, b, bDone, []byte("b"))
	checkDelivered(t, sink, append(append(append([]string{}, preSplit...), aDone...), bDone...), 30*time.Second)
	if err := sink.SetFailing(true); err != nil {
		t.Fatal(err)
	}
	n := healMessages()
	payload := []byte(strings.Repeat("x", 512))
	aPending, bPending := seqIDs("a-pending", n), seqIDs("b-pending", n)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); enqueueAll(t, a, aPending, payload) }()
	go func() { defer wg.Done(); enqueueAll(t, b, bPending, payload) }()
	wg.Wait()
	for _, ids := range [][]string{preSplit, aDone, bDone, aPending, bPending} {
		all = append(all, ids...)
	}
	return all, preSplit
}

func assertDupsBounded(t *testing.T, dups map[string]int, allowed []string) {
	t.Helper()
	ok := map[string]bool{}
	for _, id := range allowed {
		ok[id] = true
	}
	for id, n := range dups {
		if !ok[id] {
			t.Errorf("%s delivered %d times but was not delivered on both sides during the split", id, n)
		}
	}
	t.Logf("duplicates: %d ids (bound: %d pre-split ids delivered on both sides)", len(dups), len(allowed))
}

// TestHealAfterDualActive: a partition longer than override_after with
// work on both sides ends dual-active; when the link comes back the pair
// heals to one Active and two voters by itself and every acknowledged
// message from both sides is delivered.
func TestHealAfterDualActive(t *testing.T) {
	c, links, sink := healPair(t)
	all, preSplit := splitWithWork(t, c, links, sink)

	links.Cut(false)
	winner, loser, took := waitHealed(t, c, 60*time.Second)
	t.Logf("link restored → one Active (%s) and two voters in %s (%d pending messages per side)", winner.ID, took.Round(time.Millisecond), healMessages())

	if err := sink.SetFailing(false); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	dups := checkDelivered(t, sink, all, 60*time.Second)
	t.Logf("all %d acknowledged messages delivered %s after the heal", len(all), time.Since(start).Round(time.Millisecond))
	assertDupsBounded(t, dups, preSplit)

	var audit []*controlpb.AuditEntry
	ctlJSON(t, c, []*testcluster.Node{winner}, &audit, "audit", "--limit", "10000")
	kinds := map[string]int{}
	for _, e := range audit {
		kinds[e.Kind]++
	}
	for _, k := range []string{"heal.split_detected", "heal.begin", "heal.merged", "heal.peer_audit"} {
		if kinds[k] == 0 {
			t.Errorf("winner's audit has no %s entry (kinds %v)", k, kinds)
		}
	}
	if !strings.Contains(loser.LogTail(400), "handed over and rejoined") {
		t.Errorf("loser %s did not log its rejoin", loser.ID)
	}
}

// TestHealSurvivesSIGKILL kills the loser right after it fenced itself and
// the winner in the middle of absorbing, then checks the heal completes
// with nothing lost.
func TestHealSurvivesSIGKILL(t *testing.T) {
	for _, victim := range []string{"loser", "winner"} {
		t.Run(victim, func(t *testing.T) {
			c, links, sink := healPair(t)
			all, preSplit := splitWithWork(t, c, links, sink)
			links.Cut(false)
			// Kill the victim at the first sign of the merge in its log.
			sign := map[string]string{"loser": "FENCE:", "winner": "heal: merge begun"}[victim]
			var killed *testcluster.Node
			testwait.For(t, 60*time.Second, "the merge to start ("+sign+")", func() bool {
				for _, n := range c.Nodes {
					if strings.Contains(n.LogTail(200), sign) {
						killed = n
						return true
					}
				}
				return false
			})

			c.Kill(killed)
			t.Logf("killed the %s %s mid-merge", victim, killed.ID)
			if err := c.Start(killed); err != nil {
				t.Fatal(err)
			}
			winner, _, took := waitHealed(t, c, 90*time.Second)
			t.Logf("healed after the kill in %s; winner %s", took.Round(time.Millisecond), winner.ID)
			if err := sink.SetFailing(false); err != nil {
				t.Fatal(err)
			}
			assertDupsBounded(t, checkDelivered(t, sink, all, 60*time.Second), preSplit)
		})
	}
}

// TestHealFlappingLink cuts and restores the link every few seconds under
// a steady workload; no acknowledged message may be lost and the pair must
// end converged.
func TestHealFlappingLink(t *testing.T) {
	c, links, sink := healPair(t)
	stop := make(chan struct{})
	acked := workload(c, 2, "flap", stop)
	for i := 0; i < 6; i++ {
		links.Cut(i%2 == 0)
		time.Sleep(3500 * time.Millisecond)
	}
	links.Cut(false)
	close(stop)
	ids := acked()
	waitHealed(t, c, 90*time.Second)
	var want []string
	for id := range ids {
		want = append(want, id)
	}
	dups := checkDelivered(t, sink, want, 60*time.Second)
	t.Logf("flapping: %d acknowledged, all delivered, %d delivered more than once", len(want), len(dups))
}
