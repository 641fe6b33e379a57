package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/pki"
)

func writeSite(t *testing.T, site []byte) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "site.yaml")
	if err := os.WriteFile(file, site, 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

func deployStatus(t *testing.T, c *testcluster.Cluster) *controlpb.DeployStatusResponse {
	t.Helper()
	var st controlpb.DeployStatusResponse
	ctlJSON(t, c, nil, &st, "deploy", "status")
	return &st
}

func TestDeployForwardedFromStandbyAndCAS(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	standby := otherVoter(t, c, active)
	site1 := testcluster.SiteConfig("cas", map[string]string{"a": "http://127.0.0.1:9/a"}, 5)
	var push controlpb.DeployPushResponse
	ctlJSON(t, c, []*testcluster.Node{standby}, &push, "deploy", "push", writeSite(t, site1))
	if push.Revision != 1 {
		t.Fatalf("push through the standby = %+v, want revision 1", &push)
	}
	ctlJSON(t, c, []*testcluster.Node{standby}, &push, "deploy", "push", writeSite(t, site1))
	if !push.Noop || push.Revision != 1 {
		t.Fatalf("identical re-push = %+v, want a no-op at revision 1", &push)
	}

	// Five operators push different content expecting revision 1: one wins.
	var wg sync.WaitGroup
	codes := make([]int, 5)
	for i := range codes {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			site := testcluster.SiteConfig("cas", map[string]string{fmt.Sprintf("t%d", i): "http://127.0.0.1:9/x"}, 5)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _, codes[i], _ = c.Ctl(ctx, []*testcluster.Node{c.Nodes[i%2]}, "deploy", "push", "--expect-revision", "1", writeSite(t, site))
		}(i)
	}
	wg.Wait()
	wins, refused := 0, 0
	for _, code := range codes {
		switch code {
		case 0:
			wins++
		case 4:
			refused++
		}
	}
	if wins != 1 || refused != 4 {
		t.Fatalf("concurrent pushes with --expect-revision 1 exited %v; want exactly one 0 and four 4s", codes)
	}
	if st := deployStatus(t, c); st.Current != 2 {
		t.Fatalf("revision after the race = %d, want 2", st.Current)
	}
}

func TestDeployNodeKilledMidDeployCatchesUp(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	standby := otherVoter(t, c, active)
	deploySite(t, c, testcluster.SiteConfig("kill", map[string]string{"a": "http://127.0.0.1:9/a"}, 5))
	// Push a large config and kill the standby while it streams in.
	big := bigSite(t)
	done := make(chan int, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, _, code, _ := c.Ctl(ctx, []*testcluster.Node{active}, "deploy", "push", writeSite(t, big))
		done <- code
	}()
	time.Sleep(100 * time.Millisecond)
	c.Kill(standby)
	if code := <-done; code != 0 {
		t.Fatalf("push with one voter killed mid-way exited %d", code)
	}
	start(t, c, standby)
	testwait.For(t, 60*time.Second, standby.ID+" applied revision 2 after its restart", func() bool {
		for _, n := range deployStatus(t, c).Nodes {
			if n.NodeId == standby.ID && n.Revision == 2 && n.Ok {
				return true
			}
		}
		return false
	})

}

// bigSite is a generated config of about a megabyte: several chunks.
func bigSite(t *testing.T) []byte {
	t.Helper()
	var b strings.Builder
	b.WriteString(string(testcluster.SiteConfig("big", map[string]string{"a": "http://127.0.0.1:9/a"}, 5)))
	site := b.String()
	// Add instances before the opcua section.
	var inst strings.Builder
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&inst, "  - name: Unit%d\n    connection: gw\n    attributes:\n", i)
		for j := 0; j < 100; j++ {
			fmt.Fprintf(&inst, "      - {name: Tag%d, type: double, tag: Unit%d.Tag%d.PV, description: \"generated tag %d of unit %d for the deploy test\"}\n", j, i, j, j, i)
		}
	}
	return []byte(strings.Replace(site, "opcua:\n", inst.String()+"opcua:\n", 1))
}

// nodeClient dials the control API with a node's own certificate, the way
// nodes forward raw commands to each other.
func nodeClient(t *testing.T, c *testcluster.Cluster, as string, to *testcluster.Node) controlpb.ControlClient {
	t.Helper()
	conf, err := pki.LoadClientTLS(filepath.Join(c.Certs, "ca.crt"), filepath.Join(c.Certs, as+".crt"), filepath.Join(c.Certs, as+".key"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(to.APIAddr, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return controlpb.NewControlClient(conn)
}

func applyRaw(t *testing.T, cli controlpb.ControlClient, cmd *fsmpb.Command) *controlpb.ApplyResponse {
	t.Helper()
	cmd.StampUnixNano = time.Now().UnixNano()
	data, err := fsm.Encode(cmd)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Apply(ctx, &controlpb.ApplyRequest{Command: data})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return resp
}

func TestDeployCorruptArtifactsKeepLastGood(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	good := deploySite(t, c, testcluster.SiteConfig("good", map[string]string{"a": "http://127.0.0.1:9/a"}, 5))
	cli := nodeClient(t, c, "node-a", active)

	// An operator certificate may not send raw commands at all.
	opCli := nodeClient(t, c, "operator", active)
	if _, err := opCli.Apply(context.Background(), &controlpb.ApplyRequest{Command: []byte("x")}); err == nil || !strings.Contains(err.Error(), "PermissionDenied") {
		t.Fatalf("raw apply with an operator certificate: %v; want a refusal", err)
	}

	// Bad checksum: chunks whose content does not hash to the name.
	payload := []byte("version: 1\nname: evil\n")
	wrongSHA := strings.Repeat("ab", 32)
	applyRaw(t, cli, &fsmpb.Command{Body: &fsmpb.Command_PutArtifactChunk{PutArtifactChunk: &fsmpb.PutArtifactChunk{Sha256: wrongSHA, Index: 0, Total: 1, Data: payload}}})
	resp := applyRaw(t, cli, &fsmpb.Command{Body: &fsmpb.Command_CommitArtifact{CommitArtifact: &fsmpb.CommitArtifact{Sha256: wrongSHA, Size: uint64(len(payload)), TotalChunks: 1}}})
	if resp.ErrorCode == "" {
		t.Fatal("an artifact with a wrong checksum was committed")
	}
	resp = applyRaw(t, cli, &fsmpb.Command{Body: &fsmpb.Command_Deploy{Deploy: &fsmpb.Deploy{Target: "site", ExpectRevision: good, Sha256: wrongSHA}}})
	if resp.ErrorCode == "" {
		t.Fatal("a deploy of an uncommitted artifact was accepted")
	}
	// Truncated: one of two chunks never arrives.
	sum := sha256.Sum256(append(payload, payload...))
	twoSHA := hex.EncodeToString(sum[:])
	applyRaw(t, cli, &fsmpb.Command{Body: &fsmpb.Command_PutArtifactChunk{PutArtifactChunk: &fsmpb.PutArtifactChunk{Sha256: twoSHA, Index: 0, Total: 2, Data: payload}}})
	resp = applyRaw(t, cli, &fsmpb.Command{Body: &fsmpb.Command_CommitArtifact{CommitArtifact: &fsmpb.CommitArtifact{Sha256: twoSHA, Size: uint64(2 * len(payload)), TotalChunks: 2}}})
	if resp.ErrorCode == "" {
		t.Fatal("an artifact missing a chunk was committed")
	}
	if st := deployStatus(t, c); st.Current != good {
		t.Fatalf("refused artifacts moved the pointer to %d", st.Current)
	}

	// Schema-invalid but intact: the cluster takes the pointer, every node
	// refuses to apply it, keeps the last good config and says why.
	invalid := []byte("version: 1\nname: broken\nconnections: []\ninstances: []\n")
	isum := sha256.Sum256(invalid)
	isha := hex.EncodeToString(isum[:])
	applyRaw(t, cli, &fsmpb.Command{Body: &fsmpb.Command_PutArtifactChunk{PutArtifactChunk: &fsmpb.PutArtifactChunk{Sha256: isha, Index: 0, Total: 1, Data: invalid}}})
	if r := applyRaw(t, cli, &fsmpb.Command{Body: &fsmpb.Command_CommitArtifact{CommitArtifact: &fsmpb.CommitArtifact{Sha256: isha, Size: uint64(len(invalid)), TotalChunks: 1}}}); r.ErrorCode != "" {
		t.Fatalf("commit of an intact artifact: %s %s", r.ErrorCode, r.Error)
	}
	if r := applyRaw(t, cli, &fsmpb.Command{Body: &fsmpb.Command_Deploy{Deploy: &fsmpb.Deploy{Target: "site", ExpectRevision: good, Sha256: isha}}}); r.ErrorCode != "" {
		t.Fatalf("deploy of the intact invalid artifact: %s %s", r.ErrorCode, r.Error)
	}
	testwait.For(t, 20*time.Second, "every node reports the invalid revision failed", func() bool {
		st := deployStatus(t, c)
		failed := 0
		for _, n := range st.Nodes {
			if n.Revision == good+1 && !n.Ok && strings.Contains(n.Reason, "connections") {
				failed++
			}
		}
		return failed == len(c.Nodes)
	})

	// The nodes still run the good config: its target accepts enqueues.
	if !enqueue(active, "a", "still-good", []byte("x")) {
		t.Fatal("after the failed apply the last good config's target is gone")
	}
	// Rolling back to the good revision heals the failure everywhere.
	var rb controlpb.DeployPushResponse
	ctlJSON(t, c, nil, &rb, "deploy", "rollback", "--to", fmt.Sprint(good))
	testwait.For(t, 20*time.Second, "every node applied the rollback", func() bool {
		ok := 0
		for _, n := range deployStatus(t, c).Nodes {
			if n.Revision == rb.Revision && n.Ok {
				ok++
			}
		}
		return ok == len(c.Nodes)
	})

}

func TestDeployRollbackRestoresBehaviour(t *testing.T) {
	c, sinkA := sfSetup(t, 1000)
	sinkB := startSink(t)
	active := waitOneActive(t, c, 10*time.Second)
	if !enqueue(active, "sink", "to-a-1", []byte("1")) {
		t.Fatal("enqueue failed")
	}
	waitDelivered(t, sinkA, map[string]bool{"to-a-1": true}, 20*time.Second)

	deploySite(t, c, testcluster.SiteConfig("sf-test", map[string]string{"sink": sinkB.URL}, 1000))
	if !enqueue(active, "sink", "to-b", []byte("2")) {
		t.Fatal("enqueue failed")
	}
	waitDelivered(t, sinkB, map[string]bool{"to-b": true}, 20*time.Second)

	var rb controlpb.DeployPushResponse
	ctlJSON(t, c, nil, &rb, "deploy", "rollback")
	testwait.For(t, 20*time.Second, "every node applied the rollback", func() bool {
		ok := 0
		for _, n := range deployStatus(t, c).Nodes {
			if n.Revision == rb.Revision && n.Ok {
				ok++
			}
		}
		return ok == len(c.Nodes)
	})

	if !enqueue(active, "sink", "to-a-2", []byte("3")) {
		t.Fatal("enqueue failed")
	}
	waitDelivered(t, sinkA, map[string]bool{"to-a-2": true}, 20*time.Second)
	var hist controlpb.DeployHistoryResponse
	ctlJSON(t, c, nil, &hist, "deploy", "history")
	last := hist.Revisions[len(hist.Revisions)-1]
	if last.RollbackOf != 1 || last.Sha256 != hist.Revisions[0].Sha256 {
		t.Fatalf("history's last revision = %+v, want a rollback to revision 1's artifact", last)
	}
}

// pushedThroughTheStandby starts a two-voter cluster with a witness and
// deploys a first site config (named name) through the Standby.
func pushedThroughTheStandby(ctx context.Context, t *testing.T, name string) (c *testcluster.Cluster, active, standby *testcluster.Node) {
	t.Helper()
	c = newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true})
	start(t, c)
	active = waitOneActive(t, c, 20*time.Second)
	standby = follower(c, active)
	file := writeSite(t, testcluster.SiteConfig(name, map[string]string{"sink": "http://127.0.0.1:9/x"}, 5))
	if _, errs, code, err := c.Ctl(ctx, []*testcluster.Node{standby}, "deploy", "push", file); err != nil || code != 0 {
		t.Fatalf("deploy push through the Standby: exit %d, %q, %v", code, errs, err)
	}
	return c, active, standby
}

// TestDeployThroughTheStandbyNamesTheOperator: a push sent to the Standby
// is forwarded to the leader with the Standby's node certificate; the
// history must still name the operator who sent it (and the node it came
// through). An operator's own certificate cannot claim to speak for
// someone else.
func TestDeployThroughTheStandbyNamesTheOperator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, active, standby := pushedThroughTheStandby(ctx, t, "author")
	opCli := nodeClient(t, c, "operator", active)
	spoofed := metadata.AppendToOutgoingContext(ctx, "x-scadad-on-behalf-of", "somebody-else")
	second := testcluster.SiteConfig("author", map[string]string{"sink": "http://127.0.0.1:9/y"}, 5)
	if _, err := opCli.DeployPush(spoofed, &controlpb.DeployPushRequest{Artifact: second}); err != nil {
		t.Fatalf("deploy push to the Active: %v", err)
	}
	// Read from the Active, which revision 2 was pushed to: another
	// node's replica may not have applied it yet (CI once read the
	// Standby's a moment too early).
	var hist controlpb.DeployHistoryResponse
	ctlJSON(t, c, []*testcluster.Node{active}, &hist, "deploy", "history")
	actors := map[uint64]string{}
	for _, r := range hist.Revisions {
		actors[r.Revision] = r.Actor
	}
	if want := "operator via " + standby.ID; actors[1] != want {
		t.Errorf("revision 1, pushed through %s, is by %q; want %q", standby.ID, actors[1], want)
	}
	if actors[2] != "operator" {
		t.Errorf("revision 2, pushed to the Active by an operator claiming to speak for another, is by %q; want operator", actors[2])
	}
}

// TestDeployThroughTheStandbyGivesWayWhenTheActiveFreezes: a push the
// Standby forwarded to an Active that then froze does not hang until that
// node resumes: once the Standby has taken over, the push ends saying the
// leader changed (exit 3, retry), and the retry lands.
func TestDeployThroughTheStandbyGivesWayWhenTheActiveFreezes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The first push leaves the Standby's connection to the Active open
	// when the Active freezes, as it is on a site in use.
	c, active, standby := pushedThroughTheStandby(ctx, t, "frozen")
	file := writeSite(t, testcluster.SiteConfig("frozen", map[string]string{"sink": "http://127.0.0.1:9/y"}, 5))
	c.Pause(active)
	defer c.Resume(active)
	type outcome struct {
		errs string
		code int
		err  error
	}
	done := make(chan outcome, 1)
	go func() {
		_, errs, code, err := c.Ctl(ctx, []*testcluster.Node{standby}, "deploy", "push", file)
		done <- outcome{errs, code, err}
	}()
	testwait.For(t, 15*time.Second, standby.ID+" Active", func() bool {
		h, ok := standby.Health()
		return ok && h.Role == "active"
	})

	select {
	case o := <-done:
		if o.err != nil || (o.code != 0 && (o.code != 3 || !strings.Contains(o.errs, "leader changed"))) {
			t.Fatalf("deploy push through the Standby: exit %d, %q, %v; want success, or exit 3 saying the leader changed", o.code, o.errs, o.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("deploy push through %s still waiting 10 s after it became Active, with %s frozen", standby.ID, active.ID)
	}
	if _, errs, code, err := c.Ctl(ctx, []*testcluster.Node{standby}, "deploy", "push", file); err != nil || code != 0 {
		t.Fatalf("deploy push retried on the new Active: exit %d, %q, %v", code, errs, err)
	}
}

// A Standby that has not applied the first deploy (cut off from the
// leader's replication, or just restarted) asks the leader instead of
// saying nothing has been deployed.
func TestDeployHistoryFromALaggingStandbyAsksTheLeader(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info", OverrideAfter: 30 * time.Second})
	links, err := c.InsertLinks()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(links.Close)
	// The voters keep the leader they know for 20 s without a heartbeat,
	// so the cut-off one still knows whom to ask below (the witness
	// elects itself and hands leadership to a voter as usual).
	for _, n := range c.Nodes {
		if n.Witness {
			continue
		}
		cfg, err := os.ReadFile(n.Config)
		if err != nil {
			t.Fatal(err)
		}
		slow := strings.Replace(string(cfg), "cluster:\n", "cluster:\n  heartbeat_timeout: 20s\n  election_timeout: 20s\n", 1)
		if slow == string(cfg) {
			t.Fatal("node config template changed: no cluster section")
		}
		if err := os.WriteFile(n.Config, []byte(slow), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	lagging := otherVoter(t, c, active)
	links.CutTo(lagging.RaftAddr, true) // no replication reaches it; its control API still reaches the leader's

	file := filepath.Join(t.TempDir(), "site.yaml")
	if err := os.WriteFile(file, testcluster.SiteConfig("lag", map[string]string{"sink": "http://127.0.0.1:9/x"}, 5), 0o644); err != nil {
		t.Fatal(err)
	}
	var push controlpb.DeployPushResponse
	ctlJSON(t, c, []*testcluster.Node{active}, &push, "deploy", "push", file)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var local []*controlpb.SFTargetStats
	if err := c.CtlJSON(ctx, []*testcluster.Node{lagging}, &local, "sf", "stats", "--local"); err != nil || len(local) != 0 {
		t.Fatalf("the cut-off Standby's replica: %v, %v; want no targets (it never applied the deploy)", local, err)
	}
	var history controlpb.DeployHistoryResponse
	if err := c.CtlJSON(ctx, []*testcluster.Node{lagging}, &history, "deploy", "history"); err != nil || history.Current != push.Revision {
		t.Fatalf("deploy history through the lagging Standby: %v, current %d; want revision %d from the leader", err, history.Current, push.Revision)
	}
	var st controlpb.DeployStatusResponse
	if err := c.CtlJSON(ctx, []*testcluster.Node{lagging}, &st, "deploy", "status"); err != nil || st.Current != push.Revision {
		t.Fatalf("deploy status through the lagging Standby: %v, current %d; want revision %d", err, st.Current, push.Revision)
	}

	// With the leader out of reach, its own replica answers.
	links.Cut(true)
	if _, errs, code, _ := c.Ctl(ctx, []*testcluster.Node{lagging}, "deploy", "history"); code != 5 || !strings.Contains(errs, "nothing has been deployed") {
		t.Fatalf("deploy history with the leader out of reach: exit %d, %q; want the replica's own answer", code, errs)
	}
}
