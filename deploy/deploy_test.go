package deploy

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/promtest"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/siteconfig"
)

// directProposer applies commands straight into one FSM, the way a
// one-node cluster's leader would.
type directProposer struct {
	mu    sync.Mutex
	f     *fsm.FSM
	index uint64
	// fail, when set, makes every proposal fail (no quorum).
	fail error
}

func (p *directProposer) Propose(_ context.Context, cmd *fsmpb.Command) (*fsm.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return nil, p.fail
	}
	data, err := fsm.Encode(cmd)
	if err != nil {
		return nil, err
	}
	p.index++
	return p.f.Apply(&raft.Log{Index: p.index, Term: 1, Type: raft.LogCommand, Data: data}).(*fsm.Result), nil
}

func setup(t *testing.T) (*fsm.FSM, *directProposer, *Pusher) {
	t.Helper()
	f, err := fsm.Open(filepath.Join(t.TempDir(), "state.db"), fsm.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	p := &directProposer{f: f}
	return f, p, &Pusher{Proposer: p, State: f, Now: time.Now}
}

func example(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile("../configs/site-example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// bigSite renders a generated site so artifacts span several chunks.
func bigSite(t *testing.T, instances, tags int) []byte {
	t.Helper()
	data, err := siteconfig.Canonical(siteconfig.Generate(instances, tags))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func u64(v uint64) *uint64 { return &v }

func TestPush(t *testing.T) {
	f, _, pusher := setup(t)
	ctx := context.Background()
	site := example(t)

	first, err := pusher.Push(ctx, PushRequest{Artifact: site, Actor: "op"})
	if err != nil {
		t.Fatalf("first push: %v", err)
	}
	if first.Revision != 1 || first.NoChange {
		t.Fatalf("first push = %+v, want revision 1", first)
	}
	again, err := pusher.Push(ctx, PushRequest{Artifact: site, Actor: "op"})
	if err != nil || !again.NoChange || again.Revision != 1 {
		t.Fatalf("identical re-push = %+v, %v; want a no-op at revision 1", again, err)
	}

	big := bigSite(t, 20, 250) // several chunks
	if len(big) <= ChunkSize {
		t.Fatalf("generated site is %d bytes, want more than one chunk", len(big))
	}
	if _, err := pusher.Push(ctx, PushRequest{Artifact: big, Expect: u64(5), Actor: "op"}); !errors.Is(err, fsm.ErrRevisionMismatch) {
		t.Fatalf("push with a stale expected revision: err = %v, want revision mismatch", err)
	}
	second, err := pusher.Push(ctx, PushRequest{Artifact: big, Expect: u64(1), Actor: "op"})
	if err != nil || second.Revision != 2 {
		t.Fatalf("second push = %+v, %v; want revision 2", second, err)
	}
	got, err := f.Artifact(second.SHA256)
	if err != nil || string(got) != string(big) {
		t.Fatalf("stored artifact differs from the pushed one (err %v)", err)
	}

	_, err = pusher.Push(ctx, PushRequest{Artifact: []byte("version: 1\nname: ''\n"), Actor: "op"})
	var invalid *InvalidError
	if !errors.As(err, &invalid) {
		t.Fatalf("invalid artifact: err = %v, want *InvalidError", err)
	}
	if d, _ := f.Deployment(DefaultTarget); d.Revision != 2 {
		t.Fatalf("an invalid push moved the pointer to %d", d.Revision)
	}

	back, err := pusher.Rollback(ctx, "", 0, "op")
	if err != nil || back.Revision != 3 || back.SHA256 != first.SHA256 {
		t.Fatalf("rollback = %+v, %v; want revision 3 with the first artifact", back, err)
	}
	if _, err := pusher.Rollback(ctx, "", 42, "op"); !errors.Is(err, fsm.ErrNotFound) {
		t.Fatalf("rollback to a missing revision: err = %v, want not found", err)
	}
}

// A site config that lists OPC UA users with per-node password files
// (read in v0.1.0 only) is refused, naming each user and the command that
// moves it, and nothing of it is stored.
func TestPushRefusesPasswordFileUsers(t *testing.T) {
	f, _, pusher := setup(t)
	withUsers := bytes.Replace(example(t), []byte("  identities:\n    anonymous: false\n"),
		[]byte("  identities:\n    anonymous: false\n    users:\n      - {username: operator, password_file: /etc/scadad/op.pass, can_write: true}\n"), 1)
	if bytes.Equal(withUsers, example(t)) {
		t.Fatal("configs/site-example.yaml changed: no identities lines to add users to")
	}
	_, err := pusher.Push(context.Background(), PushRequest{Artifact: withUsers, Actor: "op"})
	var invalid *InvalidError
	if !errors.As(err, &invalid) || !strings.Contains(err.Error(), "no longer read") || !strings.Contains(err.Error(), "scadactl opcua users set operator --password-file /etc/scadad/op.pass --can-write") {
		t.Fatalf("push with a password-file user: err = %v; want an InvalidError naming the user and scadactl opcua users set", err)
	}
	if _, err := f.Artifact(sha256hex(withUsers)); err == nil {
		t.Fatal("a refused push stored its artifact")
	}
}

// A site config the daemon's Check refuses is invalid input, and nothing
// of it is stored or deployed.
func TestPushRunsTheClusterCheck(t *testing.T) {
	f, _, pusher := setup(t)
	var checked *siteconfig.Site
	pusher.Check = func(s *siteconfig.Site) error {
		checked = s
		return errors.New("connections[0] (plc): points at this cluster")
	}
	_, err := pusher.Push(context.Background(), PushRequest{Artifact: example(t), Actor: "op"})
	var invalid *InvalidError
	if !errors.As(err, &invalid) || !strings.Contains(err.Error(), "points at this cluster") {
		t.Fatalf("push refused by Check: err = %v, want an InvalidError with Check's reason", err)
	}
	if checked == nil || checked.Name != "plant-north" {
		t.Fatalf("Check saw %+v, want the parsed site", checked)
	}
	if _, err := f.Deployment(DefaultTarget); !errors.Is(err, fsm.ErrNotFound) {
		t.Fatalf("a refused push left a deployment (err %v)", err)
	}
	if _, err := f.Artifact(sha256hex(example(t))); err == nil {
		t.Fatal("a refused push stored its artifact")
	}
}

func TestApplierAppliesAcksAndKeepsLastGood(t *testing.T) {
	f, prop, pusher := setup(t)
	ctx := context.Background()
	holder := siteconfig.NewHolder()
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	a := &Applier{NodeID: "node-a", Target: DefaultTarget, State: f, Proposer: prop, Holder: holder, Now: time.Now, Log: zerolog.Nop(), Metrics: metrics}
	// The gauges: running revision, deployed revision, apply failing.
	gauges := func(step string, running, deployed uint64, failing float64) {
		t.Helper()
		for _, g := range []struct {
			name string
			want float64
		}{
			{"scadad_site_config_revision", float64(running)},
			{"scadad_site_config_deployed_revision", float64(deployed)},
			{"scadad_site_config_apply_failing", failing},
		} {
			if got, ok, err := promtest.Value(reg, g.name, ""); err != nil || !ok || got != g.want {
				t.Fatalf("%s: %s = %v (present %v, %v), want %v", step, g.name, got, ok, err, g.want)
			}
		}
	}

	a.Step(ctx) // nothing deployed: nothing happens
	if s, _ := holder.Current(); s != nil {
		t.Fatal("holder has a site before anything was deployed")
	}
	gauges("nothing deployed", 0, 0, 0)

	good, err := pusher.Push(ctx, PushRequest{Artifact: example(t), Actor: "op"})
	if err != nil {
		t.Fatal(err)
	}
	a.Step(ctx)
	if _, rev := holder.Current(); uint64(rev) != good.Revision {
		t.Fatalf("holder at revision %d, want %d", rev, good.Revision)
	}
	assertAck(t, f, "node-a", good.Revision, true, "")
	gauges("applied", good.Revision, good.Revision, 0)

	// A committed artifact that is not a valid site config: the pusher
	// would refuse it, so commit it below the pusher's validation.
	bad := []byte("version: 1\nname: broken\nconnections: [{name: x, kind: nonsense}]\n")
	if err := pusher.store(ctx, "0000000000000000000000000000000000000000000000000000000000000000", bad, "test"); err == nil {
		t.Fatal("storing an artifact under a wrong SHA-256 succeeded")
	}
	sha := sha256hex(bad)
	if err := pusher.store(ctx, sha, bad, "test"); err != nil {
		t.Fatalf("store bad artifact: %v", err)
	}
	if _, err := pusher.move(ctx, &fsmpb.Deploy{Target: DefaultTarget, ExpectRevision: good.Revision, Sha256: sha}, "test"); err != nil {
		t.Fatalf("deploy bad artifact: %v", err)
	}
	a.Step(ctx)
	if s, rev := holder.Current(); uint64(rev) != good.Revision || s == nil || s.Name != "plant-north" {
		t.Fatalf("after a bad deploy the holder is at revision %d (%v), want the last good revision %d", rev, s, good.Revision)
	}
	d, _ := f.Deployment(DefaultTarget)
	ack := findAck(t, d, "node-a")
	if ack.OK || ack.Revision != d.Revision || !strings.Contains(ack.Reason, "kind") {
		t.Fatalf("ack after a bad deploy = %+v, want failed at revision %d naming the problem", ack, d.Revision)
	}
	gauges("bad deploy", good.Revision, d.Revision, 1)

	// Rolling back brings the good one back as a new revision.
	back, err := pusher.Rollback(ctx, "", good.Revision, "op")
	if err != nil {
		t.Fatal(err)
	}
	a.Step(ctx)
	if _, rev := holder.Current(); uint64(rev) != back.Revision {
		t.Fatalf("holder at %d after rollback, want %d", rev, back.Revision)
	}
	assertAck(t, f, "node-a", back.Revision, true, "")
	gauges("rolled back", back.Revision, back.Revision, 0)
}

func TestApplierRetriesAckWithoutQuorum(t *testing.T) {
	f, prop, pusher := setup(t)
	ctx := context.Background()
	holder := siteconfig.NewHolder()
	a := &Applier{NodeID: "node-b", State: f, Proposer: prop, Holder: holder, Now: time.Now, Log: zerolog.Nop()}
	res, err := pusher.Push(ctx, PushRequest{Artifact: example(t), Actor: "op"})
	if err != nil {
		t.Fatal(err)
	}
	prop.fail = errors.New("no quorum")
	a.Step(ctx)
	// Applied locally from the replicated copy even without a leader.
	if _, rev := holder.Current(); uint64(rev) != res.Revision {
		t.Fatalf("holder at %d, want %d even without quorum", rev, res.Revision)
	}
	d, _ := f.Deployment(DefaultTarget)
	for _, ack := range d.Acks {
		if ack.NodeID == "node-b" {
			t.Fatalf("an ack was recorded while proposals fail: %+v", ack)
		}
	}
	prop.fail = nil
	a.Step(ctx)
	assertAck(t, f, "node-b", res.Revision, true, "")
}

func findAck(t *testing.T, d fsm.Deployment, node string) fsm.DeployAck {
	t.Helper()
	for _, a := range d.Acks {
		if a.NodeID == node {
			return a
		}
	}
	t.Fatalf("no ack from %s in %+v", node, d.Acks)
	return fsm.DeployAck{}
}

func assertAck(t *testing.T, f *fsm.FSM, node string, rev uint64, ok bool, reason string) {
	t.Helper()
	d, err := f.Deployment(DefaultTarget)
	if err != nil {
		t.Fatal(err)
	}
	a := findAck(t, d, node)
	if a.Revision != rev || a.OK != ok || a.Reason != reason {
		t.Fatalf("ack of %s = %+v, want revision %d ok=%v reason %q", node, a, rev, ok, reason)
	}
}

// countingState counts the reads of the deployment pointer.
type countingState struct {
	*fsm.FSM
	reads atomic.Int64
}

func (c *countingState) Deployment(target string) (fsm.Deployment, error) {
	c.reads.Add(1)
	return c.FSM.Deployment(target)
}

// A burst of applied entries that are not deploys (an enqueue load) costs
// one look at the deployment pointer per StepSpacing, not one per entry;
// a deploy at the end of the burst is still applied.
func TestApplierCoalescesChangesWithinItsSpacing(t *testing.T) {
	f, prop, pusher := setup(t)
	state := &countingState{FSM: f}
	holder := siteconfig.NewHolder()
	a := &Applier{NodeID: "node-a", State: state, Proposer: prop, Holder: holder, Now: time.Now, Log: zerolog.Nop(),
		StepSpacing: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	testwait.For(t, 5*time.Second, "the first Step", func() bool { return state.reads.Load() >= 1 })
	for i := range 200 {
		res, err := prop.Propose(ctx, &fsmpb.Command{Actor: "op", StampUnixNano: int64(i + 1),
			Body: &fsmpb.Command_Audit{Audit: &fsmpb.Audit{Kind: "note", Detail: "not a deploy"}}})
		if err != nil || res.Err != nil {
			t.Fatal(err, res.Err)
		}
	}
	// Give the Applier time to take changes it should not act on yet.
	time.Sleep(50 * time.Millisecond)
	if n := state.reads.Load(); n != 1 {
		t.Fatalf("%d reads of the deployment pointer for a burst of 200 entries within the spacing, want 1 (the first Step's)", n)
	}
	cancel()
	<-ran

	// With a short spacing, a deploy pushed after a burst is applied.
	a.StepSpacing = 20 * time.Millisecond
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() { ran <- a.Run(ctx) }()
	for i := range 50 {
		if _, err := prop.Propose(ctx, &fsmpb.Command{Actor: "op", StampUnixNano: int64(i + 1),
			Body: &fsmpb.Command_Audit{Audit: &fsmpb.Audit{Kind: "note", Detail: "not a deploy"}}}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := pusher.Push(ctx, PushRequest{Artifact: example(t), Actor: "op"})
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "the pushed revision applied", func() bool {
		_, rev := holder.Current()
		return uint64(rev) == res.Revision
	})
}
