package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// sfSetup starts a 2+witness cluster, a recording sink, and deploys a site
// config whose target "sink" is that sink. It waits until every node has
// applied the config.
func sfSetup(t *testing.T, maxAttempts int, sinkArgs ...string) (*testcluster.Cluster, *testcluster.Sink) {
	t.Helper()
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	waitOneActive(t, c, 20*time.Second)
	sink := startSink(t, sinkArgs...)
	deploySite(t, c, testcluster.SiteConfig("sf-test", map[string]string{"sink": sink.URL}, maxAttempts))
	return c, sink
}

// startSink starts a recording sink process (sfsink args) for the test.
func startSink(t *testing.T, args ...string) *testcluster.Sink {
	t.Helper()
	sink, err := testcluster.StartSink(bin, t.TempDir(), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sink.Close)
	return sink
}

// startSim starts a gateway simulator process (mxgw-sim args) for the test.
func startSim(t *testing.T, args ...string) *testcluster.Sim {
	t.Helper()
	sim, err := testcluster.StartSim(bin, t.TempDir(), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	return sim
}

// sfSetupPending is sfSetup with the sink refusing everything, so what is
// enqueued stays pending; it returns the Active node too.
func sfSetupPending(t *testing.T) (*testcluster.Cluster, *testcluster.Sink, *testcluster.Node) {
	t.Helper()
	c, sink := sfSetup(t, 1000)
	if err := sink.SetFailing(true); err != nil {
		t.Fatal(err)
	}
	return c, sink, waitOneActive(t, c, 10*time.Second)
}

// deploySite pushes a site config and waits until every node reports it
// applied.
func deploySite(t *testing.T, c *testcluster.Cluster, site []byte) uint64 {
	t.Helper()
	file := filepath.Join(t.TempDir(), "site.yaml")
	if err := os.WriteFile(file, site, 0o644); err != nil {
		t.Fatal(err)
	}
	var push controlpb.DeployPushResponse
	ctlJSON(t, c, nil, &push, "deploy", "push", file)
	testwait.For(t, 20*time.Second, fmt.Sprintf("every node applied revision %d", push.Revision), func() bool {
		return everyNodeApplied(c, push.Revision)
	})

	return push.Revision
}

// everyNodeApplied reports whether the deployment is at rev and every node
// has reported rev applied.
func everyNodeApplied(c *testcluster.Cluster, rev uint64) bool {
	var st controlpb.DeployStatusResponse
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.CtlJSON(ctx, nil, &st, "deploy", "status"); err != nil || st.Current != rev {
		return false
	}
	ok := 0
	for _, n := range st.Nodes {
		if n.Revision == rev && n.Ok {
			ok++
		}
	}
	return ok == len(c.Nodes)
}

// enqueueNumbered enqueues count messages prefix-0… through n's HTTP endpoint
// to the target "sink" and returns their ids; each must be acknowledged.
func enqueueNumbered(t *testing.T, n *testcluster.Node, prefix string, count int) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for i := 0; i < count; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if !enqueue(n, "sink", id, []byte(id)) {
			t.Fatalf("enqueue %s not acknowledged", id)
		}
		ids[id] = true
	}
	return ids
}

var enqueueClient = &http.Client{Timeout: 5 * time.Second}

// enqueue posts one message to n's local enqueue endpoint; it reports
// whether the node acknowledged it.
func enqueue(n *testcluster.Node, target, id string, payload []byte) bool {
	return enqueueWith(enqueueClient, n, target, id, payload)
}

// enqueueWith is enqueue through cl. The body is read to its end, so the
// connection can be kept alive for the next request.
func enqueueWith(cl *http.Client, n *testcluster.Node, target, id string, payload []byte) bool {
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.HTTPAddr+"/v1/sf/"+target, bytes.NewReader(payload))
	req.Header.Set("Idempotency-Key", id)
	resp, err := cl.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated
}

// workload enqueues from several clients spread over the running nodes
// until stop is closed, and returns the acknowledged ids.
func workload(c *testcluster.Cluster, clients int, prefix string, stop <-chan struct{}) func() map[string]bool {
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				var running []*testcluster.Node
				for _, n := range c.Nodes {
					if n.Running() && !n.Witness {
						running = append(running, n)
					}
				}
				if len(running) == 0 {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				n := running[rng.IntN(len(running))]
				id := fmt.Sprintf("%s-%d-%d", prefix, i, seq)
				// Retry an unacknowledged message under the same id, as a
				// real client would; acked is what the system promised.
				for attempt := 0; attempt < 3; attempt++ {
					if enqueue(n, "sink", id, []byte(id)) {
						mu.Lock()
						acked[id] = true
						mu.Unlock()
						break
					}
				}
			}
		}(i)
	}
	return func() map[string]bool {
		wg.Wait()
		return acked
	}
}

// waitDelivered waits until every acked id reached the sink and returns the
// ids delivered more than once, with their number of deliveries.
func waitDelivered(t *testing.T, sink *testcluster.Sink, acked map[string]bool, timeout time.Duration) map[string]int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, err := sink.Deliveries() // successful (2xx) deliveries only
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, d := range got {
			seen[d.ID]++
		}
		var missing []string
		for id := range acked {
			if seen[id] == 0 {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			dups := map[string]int{}
			for id, n := range seen {
				if n > 1 {
					dups[id] = n
				}
			}
			return dups
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged messages never delivered, e.g. %v", len(missing), len(acked), missing[:min(10, len(missing))])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestSFEveryAckDeliveredAcrossSIGKILLOfActive(t *testing.T) {
	c, sink := sfSetup(t, 1000)
	stop := make(chan struct{})
	wait := workload(c, 8, "kill", stop)
	time.Sleep(1500 * time.Millisecond) // let a backlog build and drain
	active := c.Actives()
	if len(active) != 1 {
		t.Fatalf("Actives before the kill: %v", ids(active))
	}
	c.Kill(active[0])
	waitOneActive(t, c, 10*time.Second)
	time.Sleep(1500 * time.Millisecond) // keep writing through the new Active
	start(t, c, active[0])
	time.Sleep(500 * time.Millisecond)
	close(stop)
	acked := wait()
	if len(acked) < 100 {
		t.Fatalf("only %d messages acknowledged; the workload did not run", len(acked))
	}
	dups := waitDelivered(t, sink, acked, 60*time.Second)
	t.Logf("%d acknowledged, all delivered, %d delivered more than once (around the failover)", len(acked), len(dups))
}

func TestSFTargetFailsThenRecoversAndParking(t *testing.T) {
	c, sink := sfSetup(t, 3)
	active := waitOneActive(t, c, 10*time.Second)
	if err := sink.SetFailing(true); err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("park-%d", i)
		if !enqueue(active, "sink", id, []byte(id)) {
			t.Fatalf("enqueue %s not acknowledged", id)
		}
		acked[id] = true
	}
	testwait.For(t, 30*time.Second, "all 20 messages parked after 3 attempts", func() bool {
		var stats []*controlpb.SFTargetStats
		ctlJSON(t, c, nil, &stats, "sf", "stats")
		return len(stats) == 1 && stats[0].Parked == 20 && stats[0].Pending == 0
	})

	// sf list answers from the answering node's replica, which may trail
	// the Active's figures by a commit timeout.
	var parked []*controlpb.SFMessage
	testwait.For(t, 10*time.Second, "sf list --parked showing all 20", func() bool {
		parked = nil
		ctlJSON(t, c, nil, &parked, "sf", "list", "--parked", "--target", "sink")
		return len(parked) == 20
	})

	if parked[0].ParkReason == "" {
		t.Fatalf("sf list --parked: first %+v; want a park reason", parked[0])
	}

	// Discard one, retry the rest once the target recovers.
	var res controlpb.SFSelectResponse
	ctlJSON(t, c, nil, &res, "--yes", "sf", "discard", "park-0")
	if res.Affected != 1 {
		t.Fatalf("discard affected %d", res.Affected)
	}
	delete(acked, "park-0")
	if err := sink.SetFailing(false); err != nil {
		t.Fatal(err)
	}
	ctlJSON(t, c, nil, &res, "sf", "retry", "--all", "--target", "sink")
	if res.Affected != 19 {
		t.Fatalf("retry --all affected %d, want 19", res.Affected)
	}
	waitDelivered(t, sink, acked, 30*time.Second)
	got, _ := sink.Deliveries()
	for _, d := range got {
		if d.ID == "park-0" {
			t.Fatal("the discarded message was delivered")
		}
	}
}

func TestSFFollowerDownForBurstThenAllNodesRestart(t *testing.T) {
	c, sink, active := sfSetupPending(t)
	standby := otherVoter(t, c, active)
	c.Kill(standby)
	acked := map[string]bool{}
	for i := 0; i < 200; i++ {
		id := fmt.Sprintf("burst-%d", i)
		if enqueue(active, "sink", id, []byte(id)) {
			acked[id] = true
		}
	}
	if len(acked) != 200 {
		t.Fatalf("%d of 200 acknowledged with one voter down", len(acked))
	}
	start(t, c, standby)
	testwait.For(t, 20*time.Second, standby.ID+" back", func() bool {
		h, ok := standby.Health()
		return ok && h.Role == "standby"
	})

	// Everything down, then everything up: the buffer is on disk.
	for _, n := range c.Nodes {
		c.Kill(n)
	}
	start(t, c)
	waitOneActive(t, c, 30*time.Second)
	if err := sink.SetFailing(false); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, sink, acked, 60*time.Second)
}

// TestSFStatsThroughTheStandby: only the Active delivers, so `sf stats`
// answered by the Standby must still show the failing target's last error
// (the Standby asks the Active). With no Active left the Standby answers
// from its replica and says so; --local asks for the replica on purpose.
func TestSFStatsThroughTheStandby(t *testing.T) {
	c, _, active := sfSetupPending(t)
	if !enqueue(active, "sink", "stats-1", []byte("x")) {
		t.Fatal("enqueue not acknowledged")
	}
	standby := follower(c, active)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	testwait.For(t, 20*time.Second, "the Standby's sf stats showing the Active's last error", func() bool {
		var stats []*controlpb.SFTargetStats
		if err := c.CtlJSON(ctx, []*testcluster.Node{standby}, &stats, "sf", "stats"); err != nil {
			return false
		}
		return len(stats) == 1 && stats[0].Pending == 1 && strings.Contains(stats[0].LastError, "503")
	})

	// The replica may trail the Active by a commit timeout.
	var local []*controlpb.SFTargetStats
	testwait.For(t, 10*time.Second, "the Standby's replica holding the message", func() bool {
		local = nil
		err := c.CtlJSON(ctx, []*testcluster.Node{standby}, &local, "sf", "stats", "--local")
		return err == nil && len(local) == 1 && local[0].Pending == 1
	})

	if local[0].LastError != "" {
		t.Fatalf("sf stats --local on the Standby = %+v; want no error (it does not deliver)", local)
	}

	for _, n := range c.Nodes {
		if n != standby {
			c.Kill(n)
		}
	}
	out, errs, code, err := c.Ctl(ctx, []*testcluster.Node{standby}, "sf", "stats")
	if err != nil || code != 0 || !strings.Contains(out, "sink") || !strings.Contains(errs, "replica, not the Active's") {
		t.Fatalf("sf stats with no Active: exit %d, %q, %q, %v; want the replica's figures, marked", code, out, errs, err)
	}
}

// TestSFOperatorWritesShowOnTheStandbyAtOnce: a discard or retry sent to
// the Standby is committed by the Active; the Standby's own `sf list` right
// after the answer must already show it (read your writes), not the parked
// message the operator just removed.
func TestSFOperatorWritesShowOnTheStandbyAtOnce(t *testing.T) {
	c, sink := sfSetup(t, 1)
	active := waitOneActive(t, c, 10*time.Second)
	if err := sink.SetFailing(true); err != nil {
		t.Fatal(err)
	}
	const n = 12
	enqueueNumbered(t, active, "seen", n)
	standby := follower(c, active)
	cli := nodeClient(t, c, "operator", standby)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	parked := func() map[string]bool {
		resp, err := cli.SFList(ctx, &controlpb.SFListRequest{Target: "sink", Parked: true, Limit: 1000})
		if err != nil {
			t.Fatalf("sf list --parked on the Standby: %v", err)
		}
		ids := map[string]bool{}
		for _, m := range resp.Messages {
			ids[m.Id] = true
		}
		return ids
	}
	testwait.For(t, 30*time.Second, "all messages parked after one attempt, on the Standby's replica", func() bool {
		return len(parked()) == n
	})

	if err := sink.SetFailing(false); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("seen-%d", i)
		sel := &controlpb.SFSelectRequest{Ids: []string{id}}
		what := "discard"
		var resp *controlpb.SFSelectResponse
		var err error
		if i%2 == 0 {
			resp, err = cli.SFDiscard(ctx, sel)
		} else {
			what = "retry"
			resp, err = cli.SFRetry(ctx, sel)
		}
		if err != nil || resp.Affected != 1 {
			t.Fatalf("sf %s %s through the Standby: %v, %v", what, id, resp, err)
		}
		if parked()[id] {
			t.Fatalf("the Standby still lists %s as parked right after it answered the %s", id, what)
		}
	}
}

// TestSFEnqueueThroughTheStandbyRidesOutAFrozenActive: a write the Standby
// forwarded to an Active that then froze (SIGSTOP, a paused VM) completes
// once the Standby has taken over, not when the frozen node's deadline runs
// out (10 s, then a false "no leader" refusal) or when it resumes.
func TestSFEnqueueThroughTheStandbyRidesOutAFrozenActive(t *testing.T) {
	c, _ := sfSetup(t, 1000)
	active := waitOneActive(t, c, 10*time.Second)
	standby := follower(c, active)
	c.Pause(active)
	paused := true
	defer func() {
		if paused {
			c.Resume(active)
		}
	}()
	result := make(chan bool, 1)
	go func() { result <- enqueue(standby, "sink", "frozen-1", []byte("x")) }()
	testwait.For(t, 15*time.Second, standby.ID+" Active", func() bool {
		h, ok := standby.Health()
		return ok && h.Role == "active"
	})

	took := time.Now()
	select {
	case ok := <-result:
		if !ok {
			t.Fatal("the enqueue through the Standby was refused")
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the enqueue through %s was still waiting 5 s after it became Active, with %s frozen", standby.ID, active.ID)
	}
	t.Logf("acknowledged %s after %s became Active", time.Since(took).Round(time.Millisecond), standby.ID)
	c.Resume(active)
	paused = false
}

// A target at its max_pending refuses enqueues on every node, over HTTP
// (507) and scadactl (exit 4), nothing refused is stored, and a sink that
// recovers drains it so enqueues are taken again.
func TestSFMaxPendingRefusesOnEveryNode(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	standby := otherVoter(t, c, active)
	sink := startSink(t)
	if err := sink.SetFailing(true); err != nil {
		t.Fatal(err)
	}
	site := testcluster.SiteConfig("cap", map[string]string{"sink": sink.URL}, 1000)
	capped := bytes.Replace(site, []byte("max_payload_bytes: 65536}"), []byte("max_payload_bytes: 65536, max_pending: 3}"), 1)
	if bytes.Equal(capped, site) {
		t.Fatal("site config template changed: no target line to cap")
	}
	deploySite(t, c, capped)
	for i := range 3 {
		if !enqueue(active, "sink", fmt.Sprintf("cap-%d", i), []byte("x")) {
			t.Fatalf("enqueue cap-%d under the cap not acknowledged", i)
		}
	}
	post := func(n *testcluster.Node, id string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+n.HTTPAddr+"/v1/sf/sink", strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", id)
		resp, err := enqueueClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// Each node checks its own replica: wait until the Standby's holds
	// the three.
	testwait.For(t, 10*time.Second, "the Standby's replica holding 3", func() bool {
		var local []*controlpb.SFTargetStats
		ctlJSON(t, c, []*testcluster.Node{standby}, &local, "sf", "stats", "--local")
		return len(local) == 1 && local[0].Pending == 3
	})

	for _, n := range []*testcluster.Node{active, standby} {
		code, body := post(n, "cap-over-"+n.ID)
		if code != http.StatusInsufficientStorage || !strings.Contains(body, `"code":"target_full"`) || !strings.Contains(body, "max_pending is 3") {
			t.Fatalf("%s: HTTP %d %s, want 507 target_full naming the cap", n.ID, code, body)
		}
	}
	if _, errs, code, _ := c.Ctl(context.Background(), nil, "sf", "enqueue", "sink", "--id", "cap-ctl", "--data", "x"); code != 4 || !strings.Contains(errs, "max_pending is 3") {
		t.Fatalf("scadactl sf enqueue to a full target: exit %d, %q; want exit 4 naming the cap", code, errs)
	}
	var stats []*controlpb.SFTargetStats
	ctlJSON(t, c, nil, &stats, "sf", "stats")
	if len(stats) != 1 || stats[0].Pending != 3 || stats[0].MaxPending != 3 {
		t.Fatalf("sf stats %v, want 3 pending of max_pending 3 (nothing refused stored)", stats)
	}
	if out, _, _, _ := c.Ctl(context.Background(), nil, "sf", "stats"); !strings.Contains(out, "3/3") {
		t.Errorf("sf stats table %q lacks the pending count against the cap (3/3)", out)
	}
	if v := metricLine(active, `scadad_sf_target_full_total{target="sink"}`); v == "" || v == "0" {
		t.Errorf("scadad_sf_target_full_total on the Active = %q, want the refusals counted", v)
	}

	if err := sink.SetFailing(false); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "the capped target taking messages again", func() bool {
		return enqueue(active, "sink", "cap-after", []byte("x"))
	})

}
