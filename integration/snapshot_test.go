package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

func TestSnapshotSaveThenRestoreIntoFreshCluster(t *testing.T) {
	src, _, active := sfSetupPending(t)
	// The follower is down while the enqueues are acknowledged (the leader
	// and the witness are a quorum), so its own state lacks them until
	// the leader has caught it up after its restart.
	lagging := follower(src, active)
	src.Kill(lagging)
	for i := 0; i < 50; i++ {
		if !enqueue(active, "sink", fmt.Sprintf("snap-%d", i), []byte("payload")) {
			t.Fatalf("enqueue %d not acknowledged", i)
		}
	}
	start(t, src, lagging)
	var srcHistory controlpb.DeployHistoryResponse
	ctlJSON(t, src, nil, &srcHistory, "deploy", "history")

	// Saved through the restarted follower at once: the backup still holds
	// every acknowledged enqueue (the follower forwards to the leader).
	file := filepath.Join(t.TempDir(), "site.snap")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, errs, code, err := src.Ctl(ctx, []*testcluster.Node{lagging}, "snapshot", "save", file); err != nil || code != 0 {
		t.Fatalf("snapshot save: exit %d: %s %v", code, errs, err)
	}
	// Saving over an existing backup asks first; --yes answers.
	if _, errs, code, _ := src.Ctl(ctx, nil, "snapshot", "save", file); code != 4 || !strings.Contains(errs, "--yes") {
		t.Fatalf("snapshot save over an existing file: exit %d, %q; want a refusal asking for --yes", code, errs)
	}
	out, errs, code, err := src.Ctl(ctx, nil, "snapshot", "inspect", file)
	if err != nil || code != 0 || !regexp.MustCompile(`pending messages\s+50\n`).MatchString(out) {
		t.Fatalf("snapshot inspect: exit %d, %q %s %v; want 50 pending", code, out, errs, err)
	}

	// A corrupt copy is refused and changes nothing.
	dst := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, dst)
	waitOneActive(t, dst, 20*time.Second)
	data, _ := os.ReadFile(file)
	bad := filepath.Join(t.TempDir(), "bad.snap")
	corrupt := append([]byte(nil), data...)
	corrupt[len(corrupt)/2] ^= 0xff
	os.WriteFile(bad, corrupt, 0o644)
	if _, errs, code, _ := dst.Ctl(ctx, nil, "--yes", "snapshot", "restore", bad); code == 0 || !strings.Contains(errs, "verify") {
		t.Fatalf("restore of a corrupt snapshot: exit %d, %q; want a refusal", code, errs)
	}
	truncated := filepath.Join(t.TempDir(), "short.snap")
	os.WriteFile(truncated, data[:len(data)*2/3], 0o644)
	if _, _, code, _ := dst.Ctl(ctx, nil, "--yes", "snapshot", "restore", truncated); code == 0 {
		t.Fatal("restore of a truncated snapshot succeeded")
	}
	var empty controlpb.DeployStatusResponse
	if err := dst.CtlJSON(ctx, nil, &empty, "deploy", "status"); err == nil && empty.Current != 0 {
		t.Fatalf("refused restores changed the state: deploy revision %d", empty.Current)
	}

	if _, errs, code, err := dst.Ctl(ctx, nil, "--yes", "snapshot", "restore", file); err != nil || code != 0 {
		t.Fatalf("snapshot restore: exit %d: %s %v", code, errs, err)
	}
	// Every node of the new cluster now holds the source's state.
	for _, n := range dst.Nodes {
		testwait.For(t, 20*time.Second, n.ID+" has the restored state", func() bool {
			var stats []*controlpb.SFTargetStats
			if err := dst.CtlJSON(ctx, []*testcluster.Node{n}, &stats, "sf", "stats", "--local"); err != nil {
				return false
			}
			return len(stats) == 1 && stats[0].Target == "sink" && stats[0].Pending == 50
		})

	}
	var dstHistory controlpb.DeployHistoryResponse
	ctlJSON(t, dst, nil, &dstHistory, "deploy", "history")
	if dstHistory.Current != srcHistory.Current || len(dstHistory.Revisions) != len(srcHistory.Revisions) || dstHistory.Revisions[0].Sha256 != srcHistory.Revisions[0].Sha256 {
		t.Fatalf("deploy history after restore = %+v, want %+v", &dstHistory, &srcHistory)
	}
}

// TestSnapshotSaveWithoutALeader: with no leader a backup that is sure to
// hold every acknowledged write cannot be taken, and the refusal says how
// to save the node's own state instead; --local does.
func TestSnapshotSaveWithoutALeader(t *testing.T) {
	c, _, active := sfSetupPending(t)
	for i := 0; i < 5; i++ {
		if !enqueue(active, "sink", fmt.Sprintf("local-%d", i), []byte("payload")) {
			t.Fatalf("enqueue %d not acknowledged", i)
		}
	}
	lone := follower(c, active)
	for _, n := range c.Nodes {
		if n != lone {
			c.Kill(n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	file := filepath.Join(t.TempDir(), "lone.snap")
	_, errs, code, err := c.Ctl(ctx, []*testcluster.Node{lone}, "snapshot", "save", file)
	if err != nil || code == 0 || !strings.Contains(errs, "no backup from the leader") || !strings.Contains(errs, "--local") {
		t.Fatalf("snapshot save without a leader: exit %d, %q, %v; want a refusal naming --local", code, errs, err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("a refused save left %s (%v)", file, err)
	}
	if _, errs, code, err := c.Ctl(ctx, []*testcluster.Node{lone}, "snapshot", "save", file, "--local"); err != nil || code != 0 {
		t.Fatalf("snapshot save --local: exit %d: %s %v", code, errs, err)
	}
	out, errs, code, err := c.Ctl(ctx, nil, "snapshot", "inspect", file)
	if err != nil || code != 0 || !regexp.MustCompile(`s&f targets\s+1\n`).MatchString(out) {
		t.Fatalf("snapshot inspect of the local save: exit %d, %q %s %v; want the node's state with its target", code, out, errs, err)
	}
}

// follower is a running voter of c other than active.
func follower(c *testcluster.Cluster, active *testcluster.Node) *testcluster.Node {
	for _, n := range c.Nodes {
		if n != active && !n.Witness && n.Running() {
			return n
		}
	}
	return nil
}

func TestMembersAndManualOverrideGuard(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "pair", Voters: 2, OverrideAfter: 5 * time.Second})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	var members []*controlpb.MemberStatus
	ctlJSON(t, c, nil, &members, "members", "list")
	if len(members) != 2 || members[0].Suffrage != "voter" || members[1].Suffrage != "voter" {
		t.Fatalf("members list = %v, want two voters", members)
	}
	var standby *testcluster.Node
	for _, n := range c.Nodes {
		if n != active {
			standby = n
		}
	}
	// The peer answers: a manual override is refused (no islands).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, errs, code, err := c.Ctl(ctx, []*testcluster.Node{standby}, "--yes", "override")
	if err != nil || code != 4 {
		t.Fatalf("override while the peer answers: exit %d, %q, %v; want exit 4", code, errs, err)
	}
	if _, errs, code, _ := c.Ctl(ctx, []*testcluster.Node{standby}, "override"); code != 4 || !strings.Contains(errs, "not confirmed") {
		t.Fatalf("override without --yes and no answer: exit %d %q; want a refusal for lack of confirmation", code, errs)
	}
	if a := c.Actives(); len(a) != 1 || a[0] != active {
		t.Fatalf("refused override changed the Active: %v", ids(a))
	}
	// With the peer gone, the operator may override before the window.
	c.Kill(active)
	// Contact from just before the kill still counts for a moment.
	testwait.For(t, 10*time.Second, "the manual override accepted once the peer is silent", func() bool {
		_, _, code, err := c.Ctl(ctx, []*testcluster.Node{standby}, "--yes", "override")
		return err == nil && code == 0
	})

	testwait.For(t, 10*time.Second, standby.ID+" Active after the manual override", func() bool {
		h, ok := standby.Health()
		return ok && h.Active
	})

}

// TestSnapshotRestoreIntoTheRunningCluster: restoring a backup into the
// cluster it came from puts the whole state back, deployment included.
// What is enqueued after the restore is delivered at once (the restored
// sequence counter stands below the Active's delivery cursor, which must
// start over), and every node runs, and reports, the backup's site config
// revision, not the newer one it ran before.
func TestSnapshotRestoreIntoTheRunningCluster(t *testing.T) {
	c, sink := sfSetup(t, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var before controlpb.DeployStatusResponse
	ctlJSON(t, c, nil, &before, "deploy", "status")
	file := filepath.Join(t.TempDir(), "site.snap")
	if _, errs, code, err := c.Ctl(ctx, nil, "snapshot", "save", file); err != nil || code != 0 {
		t.Fatalf("snapshot save: exit %d: %s %v", code, errs, err)
	}

	active := waitOneActive(t, c, 10*time.Second)
	waitDelivered(t, sink, enqueueNumbered(t, active, "before", 20), 30*time.Second)
	newer := deploySite(t, c, testcluster.SiteConfig("sf-test", map[string]string{"sink": sink.URL, "other": sink.URL}, 1000))

	if _, errs, code, err := c.Ctl(ctx, nil, "--yes", "snapshot", "restore", file); err != nil || code != 0 {
		t.Fatalf("snapshot restore: exit %d: %s %v", code, errs, err)
	}
	testwait.For(t, 30*time.Second, fmt.Sprintf("every node running and reporting revision %d again (not %d)", before.Current, newer), func() bool {
		return everyNodeApplied(c, before.Current)
	})

	// The deploy status can say revision %d before a node runs it: the
	// restored state carries the acks the backup held. Each node's
	// enqueue refuses the newer revision's target once it runs the
	// backup's (one idempotency key, so a 201 while it switches stores
	// one message, not one per try).
	for _, n := range c.Nodes {
		if n.Witness {
			continue
		}
		testwait.ForDetail(t, 10*time.Second, fmt.Sprintf("%s refusing target other, which only revision %d has (it runs revision %d)", n.ID, newer, before.Current), func() (bool, string) {
			req, err := http.NewRequest(http.MethodPost, "http://"+n.HTTPAddr+"/v1/sf/other", strings.NewReader("x"))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Idempotency-Key", "probe-other-"+n.ID)
			resp, err := enqueueClient.Do(req)
			if err != nil {
				return false, err.Error()
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusNotFound, fmt.Sprintf("answered %d", resp.StatusCode)
		})
	}

	active = waitOneActive(t, c, 10*time.Second)
	waitDelivered(t, sink, enqueueNumbered(t, active, "after", 5), 20*time.Second)
}
