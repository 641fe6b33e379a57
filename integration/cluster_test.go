package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/pki"
)

func status(t *testing.T, c *testcluster.Cluster, n *testcluster.Node) *controlpb.StatusResponse {
	t.Helper()
	var st controlpb.StatusResponse
	ctlJSON(t, c, []*testcluster.Node{n}, &st, "status")
	return &st
}

func TestWitnessClusterFormsAndSurvivesSIGKILLOfActive(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true})
	start(t, c)
	first := waitOneActive(t, c, 20*time.Second)
	if first.Witness {
		t.Fatalf("the witness is Active")
	}
	st := status(t, c, first)
	if st.Voters != 3 || st.Role != "active" || st.LeaderId != first.ID {
		t.Fatalf("status of the Active = %+v, want 3 voters and itself as leader", st)
	}
	w := status(t, c, c.Node("witness"))
	if w.Role != "witness" {
		t.Fatalf("witness reports role %q", w.Role)
	}
	// The table on a node that does not lead says where the leader is.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	out, errs, code, err := c.Ctl(ctx, []*testcluster.Node{c.Node("witness")}, "--output", "table", "status")
	cancel()
	if err != nil || code != 0 || !regexp.MustCompile(`(?m)^leader commit +\d+ \(this node (has applied all of it|is \d+ entries behind)\)$`).MatchString(out) {
		t.Fatalf("scadactl status on the witness (exit %d, %v) shows no leader commit line:\n%s%s", code, err, out, errs)
	}

	killedAt := time.Now()
	c.Kill(first)
	second := waitOneActive(t, c, 10*time.Second)
	t.Logf("new Active %s after %s", second.ID, time.Since(killedAt).Round(time.Millisecond))
	if second == first || second.Witness {
		t.Fatalf("after SIGKILL of %s the Active is %s", first.ID, second.ID)
	}
	st2 := status(t, c, second)
	if st2.Term <= st.Term {
		t.Fatalf("term did not advance: %d then %d", st.Term, st2.Term)
	}
	// The new leader's no-op never reaches the state machine; status must
	// still show an idle survivor as caught up, not one entry behind.
	for _, n := range []*testcluster.Node{second, c.Node("witness")} {
		var last *controlpb.StatusResponse
		testwait.For(t, 10*time.Second, n.ID+" shows commit = applied", func() bool {
			last = status(t, c, n)
			return last.CommitIndex > 0 && last.AppliedIndex == last.CommitIndex
		})

		t.Logf("%s: commit/applied %d/%d", n.ID, last.CommitIndex, last.AppliedIndex)
	}

	// The killed node comes back as Standby, never a second Active.
	start(t, c, first)
	testwait.For(t, 20*time.Second, first.ID+" back as standby", func() bool {
		h, ok := first.Health()
		return ok && h.Role == "standby"
	})

	if a := c.Actives(); len(a) != 1 || a[0] != second {
		t.Fatalf("after the restart the Actives are %v, want only %s", ids(a), second.ID)
	}
}

func ids(nodes []*testcluster.Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.ID)
	}
	return out
}

func TestFailoverCommandMovesTheActiveRole(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true})
	start(t, c)
	first := waitOneActive(t, c, 20*time.Second)
	other := c.Node("node-a")
	if other == first {
		other = c.Node("node-b")
	}
	var resp controlpb.FailoverResponse
	ctlJSON(t, c, nil, &resp, "failover", "--to", other.ID)
	if resp.OldLeader != first.ID || resp.NewLeader != other.ID {
		t.Fatalf("failover answered %+v, want %s -> %s", &resp, first.ID, other.ID)
	}
	if got := waitOneActive(t, c, 10*time.Second); got != other {
		t.Fatalf("Active after failover is %s, want %s", got.ID, other.ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, errs, code, err := c.Ctl(ctx, nil, "failover", "--to", "witness")
	if err != nil || code != 4 || !strings.Contains(errs, "witness") {
		t.Fatalf("failover to the witness: exit %d, %q, %v; want exit 4 naming the witness", code, errs, err)
	}
	// Without --to the audit says where the role was to go, not to "".
	ctlJSON(t, c, nil, &resp, "failover")
	var entries []*controlpb.AuditEntry
	ctlJSON(t, c, nil, &entries, "audit")
	var details []string
	for _, e := range entries {
		if e.Kind == "failover" {
			details = append(details, e.Detail)
		}
	}
	if len(details) != 2 || !strings.Contains(details[0], other.ID) || strings.Contains(details[1], `""`) || !strings.Contains(details[1], "voter") {
		t.Fatalf("failover audit details %q; want the first naming %s and the second (no --to) saying another voter, not \"\"", details, other.ID)
	}
}

func TestPairSurvivorOverridesAfterWindow(t *testing.T) {
	const window = 2 * time.Second
	c := newCluster(t, testcluster.Options{Mode: "pair", Voters: 2, OverrideAfter: window})
	start(t, c)
	first := waitOneActive(t, c, 20*time.Second)
	before := status(t, c, first)
	survivor := c.Node("node-a")
	if survivor == first {
		survivor = c.Node("node-b")
	}
	killedAt := time.Now()
	c.Kill(first)
	testwait.For(t, 30*time.Second, survivor.ID+" Active alone", func() bool {
		h, ok := survivor.Health()
		return ok && h.Active
	})

	took := time.Since(killedAt)
	t.Logf("override took %s (window %s)", took.Round(time.Millisecond), window)
	if took < window {
		t.Fatalf("survivor became Active after %s, before the %s window", took, window)
	}
	st := status(t, c, survivor)
	if st.ClusterEpoch <= before.ClusterEpoch || st.Voters != 1 {
		t.Fatalf("after the override: epoch %d (before %d), voters %d; want a higher epoch and 1 voter", st.ClusterEpoch, before.ClusterEpoch, st.Voters)
	}
	// The operator was told it was coming, and when.
	if log := survivor.LogTail(400); !strings.Contains(log, "will become the sole voter and Active at override_at") {
		t.Errorf("%s never announced the coming override; its log:\n%s", survivor.ID, log)
	}
	var audit []*controlpb.AuditEntry
	ctlJSON(t, c, []*testcluster.Node{survivor}, &audit, "audit")
	found := false
	for _, e := range audit {
		found = found || strings.Contains(e.Kind, "override")
	}
	if !found {
		t.Fatalf("no override entry in the audit: %v", audit)
	}

	// The crashed node comes back and joins as Standby: one cluster.
	start(t, c, first)
	testwait.For(t, 30*time.Second, first.ID+" rejoined as standby with two voters", func() bool {
		h, ok := first.Health()
		if !ok || h.Role != "standby" {
			return false
		}
		return status(t, c, survivor).Voters == 2
	})

	if a := c.Actives(); len(a) != 1 || a[0] != survivor {
		t.Fatalf("Actives after rejoin: %v, want only %s", ids(a), survivor.ID)
	}
}

func TestPairColdStartAloneThenPeerJoins(t *testing.T) {
	for _, firstID := range []string{"node-a", "node-b"} {
		t.Run(firstID+"-first", func(t *testing.T) {
			c := newCluster(t, testcluster.Options{Mode: "pair", Voters: 2, OverrideAfter: 2 * time.Second})
			alone := c.Node(firstID)
			late := c.Node("node-a")
			if late == alone {
				late = c.Node("node-b")
			}
			start(t, c, alone)
			testwait.For(t, 30*time.Second, firstID+" Active alone", func() bool {
				h, ok := alone.Health()
				return ok && h.Active
			})

			start(t, c, late)
			testwait.For(t, 30*time.Second, late.ID+" joined as standby", func() bool {
				h, ok := late.Health()
				return ok && h.Role == "standby"
			})

			if a := c.Actives(); len(a) != 1 || a[0] != alone {
				t.Fatalf("Actives: %v, want only %s", ids(a), alone.ID)
			}
			lateStatus := status(t, c, late)
			if lateStatus.LeaderId != alone.ID {
				t.Fatalf("%s follows %q, want %s: two clusters", late.ID, lateStatus.LeaderId, alone.ID)
			}
			testwait.For(t, 10*time.Second, "two voters", func() bool { return status(t, c, alone).Voters == 2 })
		})
	}
}

func TestBadNodeConfigNamesTheField(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "node.yaml")
	os.WriteFile(cfg, []byte("node_id: a\ndata_dir: x\ncluster:\n  mode: quorum\n  members: [{id: a, raft_addr: '127.0.0.1:1', api_addr: '127.0.0.1:2'}]\ntls: {ca: ca, cert: c, key: k}\n"), 0o644)
	out, err := exec.Command(bin.Scadad, "--config", cfg).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "cluster.mode") {
		t.Fatalf("scadad with a bad mode: err %v, output %q; want a failure naming cluster.mode", err, out)
	}
}

func TestForeignCertificateIsRefused(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true})
	start(t, c)
	waitOneActive(t, c, 20*time.Second)

	// An operator certificate from another site's CA.
	foreign := filepath.Join(t.TempDir(), "foreign")
	if err := pki.Init(foreign, "other-site", []string{"node-a"}, []string{"operator"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin.Scadactl, "--endpoints", c.Nodes[0].APIAddr, "--cacert", filepath.Join(c.Certs, "ca.crt"),
		"--cert", filepath.Join(foreign, "operator.crt"), "--key", filepath.Join(foreign, "operator.key"), "--timeout", "2s", "status")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("a foreign-CA client certificate was accepted: %s", out)
	}
	// A node with a foreign certificate cannot join: start node-a's config
	// with the other site's node certificate in place of its own.
	n := c.Nodes[0]
	c.Kill(n)
	data, _ := os.ReadFile(n.Config)
	cfg := strings.ReplaceAll(string(data), filepath.Join(c.Certs, "node-a."), filepath.Join(foreign, "node-a."))
	os.WriteFile(n.Config, []byte(cfg), 0o644)
	start(t, c, n)
	// Watch it for a few election timeouts: it must never join.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if h, ok := n.Health(); ok && h.Role != "detached" {
			t.Fatalf("node with a foreign certificate reached role %q", h.Role)
		}
	}
	if !strings.Contains(n.LogTail(200), "certificate") {
		t.Fatalf("the refused node's log does not say why (no mention of the certificate)")
	}
}

func TestScadactlUnreachableSaysSo(t *testing.T) {
	ports, err := testcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	certs := filepath.Join(t.TempDir(), "certs")
	if err := pki.Init(certs, "s", []string{"n"}, []string{"operator"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	cmd := exec.Command(bin.Scadactl, "--endpoints", "127.0.0.1:"+strconv.Itoa(ports[0]), "--certs", certs, "--timeout", "2s", "status")
	out, err := cmd.CombinedOutput()
	took := time.Since(began)
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 3 || !strings.Contains(string(out), "no node reachable") {
		t.Fatalf("scadactl against nothing: %v, %q; want exit 3 saying no node is reachable", err, out)
	}
	if took > 5*time.Second {
		t.Fatalf("scadactl took %s to give up, want a few seconds", took)
	}
}

func TestMembersRemoveAndAddBack(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	w := c.Node("witness")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, errs, code, err := c.Ctl(ctx, nil, "members", "remove", "witness", "--yes"); err != nil || code != 0 {
		t.Fatalf("members remove: exit %d: %s %v", code, errs, err)
	}
	testwait.For(t, 10*time.Second, "two voters after removing the witness", func() bool { return status(t, c, active).Voters == 2 })
	if _, _, code, _ := c.Ctl(ctx, nil, "members", "remove", "nobody", "--yes"); code != 5 {
		t.Fatalf("removing an unknown member exited %d, want 5 (not found)", code)
	}
	if _, errs, code, err := c.Ctl(ctx, nil, "members", "add", "witness", w.RaftAddr); err != nil || code != 0 {
		t.Fatalf("members add: exit %d: %s %v", code, errs, err)
	}
	testwait.For(t, 10*time.Second, "three voters after adding the witness back", func() bool { return status(t, c, active).Voters == 3 })
}

func TestMetricsExposeRoleAndApplyLatency(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	deploySite(t, c, testcluster.SiteConfig("metrics", map[string]string{"a": "http://127.0.0.1:9/a"}, 5))
	var body string
	// The gauges are sampled once a second.
	testwait.For(t, 10*time.Second, "the Active's role in /metrics", func() bool {
		var err error
		body, err = scrapeMetrics(active)
		return err == nil && strings.Contains(body, `scadad_role{role="active"} 1`)
	})

	for _, want := range []string{`scadad_role{role="active"} 1`, "scadad_apply_seconds_count", "scadad_raft_term", "scadad_fsm_applied_index", "scadad_cluster_epoch"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics of the Active lacks %q", want)
		}
	}
	if strings.Contains(body, "scadad_apply_seconds_count 0\n") {
		t.Error("no apply was timed on the Active after a deploy")
	}
	// The certificates' ends, as the files say.
	v, err := pki.ReadValidity(filepath.Join(c.Certs, "ca.crt"), filepath.Join(c.Certs, active.ID+".crt"))
	if err != nil {
		t.Fatal(err)
	}
	var st controlpb.StatusResponse
	ctlJSON(t, c, []*testcluster.Node{active}, &st, "status")
	if st.CertNotAfterUnix != v.Cert.Unix() || st.CaNotAfterUnix != v.CA.Unix() {
		t.Errorf("status: certificate until %d, CA until %d; want %d and %d", st.CertNotAfterUnix, st.CaNotAfterUnix, v.Cert.Unix(), v.CA.Unix())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, _, _, _ := c.Ctl(ctx, []*testcluster.Node{active}, "status"); !strings.Contains(out, "certificates") || !strings.Contains(out, "node until "+v.Cert.UTC().Format("2006-01-02")) {
		t.Errorf("status table lacks the certificates line:\n%s", out)
	}
	for which, want := range map[string]time.Time{"node": v.Cert, "ca": v.CA} {
		line := `scadad_tls_certificate_expiry_timestamp_seconds{certificate="` + which + `"}`
		rest := metricLine(active, line)
		if rest == "" {
			t.Errorf("/metrics of the Active lacks %q", line)
			continue
		}
		got, err := strconv.ParseFloat(rest, 64)
		if err != nil || int64(got) != want.Unix() {
			t.Errorf("%s %s, want %d (the file's NotAfter)", line, rest, want.Unix())
		}
	}
}

// TestSoleVoterStopsWithoutAHandOver: a one-voter site (scadad --dev, a
// strict single node) has no one to hand the Active role to on a planned
// stop, and says so instead of warning that a hand-over failed.
func TestSoleVoterStopsWithoutAHandOver(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "strict", Voters: 1, Witness: false, LogLevel: "info"})
	start(t, c)
	n := waitOneActive(t, c, 20*time.Second)
	c.Stop(n)
	logs := n.LogTail(50)
	if !strings.Contains(logs, "sole voter: no other node to hand the Active role to") || strings.Contains(logs, "leadership transfer before shutdown failed") {
		t.Fatalf("log of a sole voter's stop:\n%s\nwant the sole-voter line and no failed hand-over", logs)
	}
}

// TestScadactlHelpAndFlagsAfterTheCommand: every command and subcommand
// answers -h with its flags (exit 0); the deploy commands before the first
// deploy say that nothing is deployed; global flags such as --yes and
// --output work after the command as before it; certs issue adds a
// certificate the running cluster trusts.
func TestScadactlHelpAndFlagsAfterTheCommand(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true})
	start(t, c)
	waitOneActive(t, c, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sf", "discard", "-h"}, "--all"},
		{[]string{"sf", "enqueue", "--help"}, "--data"},
		{[]string{"deploy", "push", "-h"}, "--expect-revision"},
		{[]string{"sf", "-h"}, "retry ID...|--all --target T"},
		{[]string{"status", "-h"}, "show the answering node"},
		{[]string{"certs", "issue", "-h"}, "--overwrite"},
	} {
		out, errs, code, err := c.Ctl(ctx, nil, tc.args...)
		if err != nil || code != 0 || !strings.Contains(out+errs, tc.want) {
			t.Errorf("scadactl %s: exit %d, %q %q, %v; want exit 0 showing %q", strings.Join(tc.args, " "), code, out, errs, err, tc.want)
		}
	}

	// A node that is down, listed first, costs next to nothing: its
	// refused connection moves on to the next endpoint at once.
	dead, err := testcluster.DeadAddr()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if _, errs, code, err := c.Ctl(ctx, []*testcluster.Node{{APIAddr: dead}, c.Nodes[0]}, "status"); err != nil || code != 0 {
		t.Fatalf("status with a dead first endpoint: exit %d, %q, %v", code, errs, err)
	}
	if took := time.Since(began); took > 1500*time.Millisecond {
		t.Errorf("status with a dead first endpoint took %s; a refused connection should not wait out its share of --timeout (2.5 s of 5 s with two endpoints)", took)
	}
	// An enqueue with neither --data nor anything piped in is a mistake,
	// not an empty message.
	if _, errs, code, _ := c.Ctl(ctx, nil, "sf", "enqueue", "sink"); code != 2 || !strings.Contains(errs, "no payload") {
		t.Errorf("sf enqueue without a payload: exit %d, %q; want exit 2 saying there is no payload", code, errs)
	}
	// A flag that would be ignored is refused.
	if _, errs, code, _ := c.Ctl(ctx, nil, "deploy", "rollback", "--expect-revision", "1"); code != 2 || !strings.Contains(errs, "takes no --expect-revision") {
		t.Errorf("deploy rollback --expect-revision: exit %d, %q; want exit 2 refusing the flag", code, errs)
	}
	// Before the first deploy the deploy commands say so.
	for _, args := range [][]string{{"deploy", "status"}, {"deploy", "history"}, {"deploy", "rollback"}} {
		if _, errs, code, _ := c.Ctl(ctx, nil, args...); code != 5 || !strings.Contains(errs, "nothing has been deployed") {
			t.Errorf("scadactl %s before any deploy: exit %d, %q; want exit 5 saying nothing has been deployed", strings.Join(args, " "), code, errs)
		}
	}

	var st controlpb.StatusResponse
	out, errs, code, err := c.Ctl(ctx, nil, "status", "--output", "json")
	if err != nil || code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.NodeId == "" {
		t.Fatalf("status --output json: exit %d, %q %q, %v", code, out, errs, err)
	}
	// --yes after the command answers the question; the id is unknown.
	_, errs, code, err = c.Ctl(ctx, nil, "sf", "discard", "no-such-id", "--yes")
	if err != nil || strings.Contains(errs, "not defined") || strings.Contains(errs, "not confirmed") {
		t.Fatalf("sf discard ID --yes: exit %d, %q, %v; want the flag taken", code, errs, err)
	}

	out, errs, code, err = c.Ctl(ctx, nil, "certs", "issue", "--dir", c.Certs, "--name", "ops2", "--client", "--role", "viewer")
	if err != nil || code != 0 {
		t.Fatalf("certs issue: exit %d, %q %q, %v", code, out, errs, err)
	}
	conf, err := pki.LoadClientTLS(filepath.Join(c.Certs, "ca.crt"), filepath.Join(c.Certs, "ops2.crt"), filepath.Join(c.Certs, "ops2.key"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(c.Nodes[0].APIAddr, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := controlpb.NewControlClient(conn).Status(ctx, &controlpb.StatusRequest{}); err != nil {
		t.Fatalf("the running cluster refused the issued client certificate: %v", err)
	}
	if _, errs, code, _ := c.Ctl(ctx, nil, "certs", "issue", "--dir", c.Certs, "--name", "ops2", "--client", "--role", "viewer"); code == 0 || !strings.Contains(errs, "--overwrite") {
		t.Fatalf("certs issue over an existing name: exit %d, %q; want a refusal naming --overwrite", code, errs)
	}

	// A new site's CA outlives its certificates (3650 against 825 days),
	// so they can be renewed one node at a time; never the other way round.
	fresh := filepath.Join(t.TempDir(), "fresh")
	if _, errs, code, _ := c.Ctl(ctx, nil, "certs", "init", "--dir", fresh, "--nodes", "a", "--days", "30", "--ca-days", "10"); code != 2 || !strings.Contains(errs, "--ca-days") {
		t.Errorf("certs init with a CA shorter than its certificates: exit %d, %q; want exit 2 naming --ca-days", code, errs)
	}
	if out, errs, code, err := c.Ctl(ctx, nil, "certs", "init", "--dir", fresh, "--nodes", "a"); err != nil || code != 0 {
		t.Fatalf("certs init: exit %d, %q %q, %v", code, out, errs, err)
	}
	v, err := pki.ReadValidity(filepath.Join(fresh, "ca.crt"), filepath.Join(fresh, "a.crt"))
	if err != nil {
		t.Fatal(err)
	}
	days := func(at time.Time) int { return int(time.Until(at).Hours()/24 + 0.5) }
	if days(v.CA) != 3650 || days(v.Cert) != 825 {
		t.Errorf("certs init: CA valid %d days, node %d; want 3650 and 825", days(v.CA), days(v.Cert))
	}
}
