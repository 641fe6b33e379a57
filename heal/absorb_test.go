package heal

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
)

// localProposer applies commands straight to an FSM, as a one-node leader
// would.
type localProposer struct {
	mu    sync.Mutex
	f     *fsm.FSM
	index uint64
}

func (p *localProposer) Propose(_ context.Context, cmd *fsmpb.Command) (*fsm.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	data, err := fsm.Encode(cmd)
	if err != nil {
		return nil, err
	}
	p.index++
	return p.f.Apply(&raft.Log{Index: p.index, Term: 1, Type: raft.LogCommand, Data: data}).(*fsm.Result), nil
}

func newWinner(t *testing.T, facts Facts) (*Absorber, *fsm.FSM, *localProposer) {
	t.Helper()
	f, err := fsm.Open(filepath.Join(t.TempDir(), "fsm.db"), fsm.Options{Logger: zerolog.Nop(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	p := &localProposer{f: f}
	a := &Absorber{Self: facts.NodeID, State: f, Proposer: p, Log: zerolog.Nop(),
		Facts: func(context.Context) (Facts, error) { return facts, nil }, Now: func() time.Time { return time.Unix(100, 0) }}
	return a, f, p
}

func auditKinds(t *testing.T, f *fsm.FSM) map[string]int {
	t.Helper()
	out := map[string]int{}
	if err := f.AuditNewestFirst(func(e fsm.AuditEntry) bool { out[e.Kind]++; return true }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAbsorberIsIdempotentAndLossless(t *testing.T) {
	ctx := context.Background()
	winnerFacts := Facts{NodeID: "node-a", Active: true, Voters: []string{"node-a"}, OverrideUnixNano: 10, ClusterEpoch: 1}
	loser := Facts{NodeID: "node-b", Active: true, Voters: []string{"node-b"}, OverrideUnixNano: 20, ClusterEpoch: 3, OverrideIndex: 7}
	a, f, p := newWinner(t, winnerFacts)

	// The winner's own state: w1 pending, w2 delivered during the split.
	if _, err := p.Propose(ctx, &fsmpb.Command{Version: 1, Body: &fsmpb.Command_SfEnqueue{SfEnqueue: &fsmpb.SFEnqueue{Messages: []*fsmpb.Message{
		{Id: "w1", Target: "t"}, {Id: "w2", Target: "t"}, {Id: "both", Target: "t"}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Propose(ctx, &fsmpb.Command{Version: 1, Body: &fsmpb.Command_SfDelivered{SfDelivered: &fsmpb.SFDelivered{Ids: []string{"w2"}}}}); err != nil {
		t.Fatal(err)
	}

	if _, err := a.Messages(ctx, "node-b-x", nil); !errors.Is(err, ErrUnknownMerge) {
		t.Fatalf("messages before begin: %v", err)
	}
	if _, _, err := a.Begin(ctx, "node-c-1", loser); err == nil {
		t.Fatal("begin accepted a merge id not naming the loser")
	}
	const id = "node-b-node-a-1"
	var splits []string
	a.OnSplit = func(_ context.Context, self, peer Facts, v Verdict) {
		splits = append(splits, self.NodeID+"<"+peer.NodeID+":"+v.Winner)
	}
	for i := 0; i < 2; i++ {
		_, resumed, err := a.Begin(ctx, id, loser)
		if err != nil || resumed != (i == 1) {
			t.Fatalf("begin #%d: resumed=%v err=%v", i, resumed, err)
		}
	}
	if len(splits) != 1 || splits[0] != "node-a<node-b:node-a" {
		t.Fatalf("split notes = %q, want one (the new merge, not its resumption)", splits)
	}
	missing, err := a.Missing(ctx, id, []string{"w1", "w2", "l1", "l2"})
	if err != nil || strings.Join(missing, ",") != "l1,l2" {
		t.Fatalf("missing: %v %v", missing, err)
	}
	msgs := []Message{{ID: "l1", Target: "t", Payload: []byte("1")}, {ID: "l2", Target: "u", Payload: []byte("2"), Parked: true}, {ID: "w2", Target: "t"}}
	for i := 0; i < 2; i++ {
		c, err := a.Messages(ctx, id, msgs)
		want := Counts{Added: 2, Duplicates: 1}
		if i == 1 {
			want = Counts{Duplicates: 3}
		}
		if err != nil || c != want {
			t.Fatalf("messages #%d: %+v %v, want %+v", i, c, err, want)
		}
	}
	// The loser delivered "both" (pending here) and "l0" (unknown here).
	for i := 0; i < 2; i++ {
		c, err := a.Finished(ctx, id, []string{"both", "l0", "w2"})
		want := Counts{Added: 2, Duplicates: 1}
		if i == 1 {
			want = Counts{Duplicates: 3}
		}
		if err != nil || c != want {
			t.Fatalf("finished #%d: %+v %v, want %+v", i, c, err, want)
		}
	}
	for _, want := range []struct {
		id    string
		state fsm.MessageState
	}{{"w1", fsm.StatePending}, {"l1", fsm.StatePending}, {"l2", fsm.StatePending}, {"both", fsm.StateFinished}, {"l0", fsm.StateFinished}} {
		if st, _ := f.SFLookup(want.id); st != want.state {
			t.Errorf("%s is %v, want %v", want.id, st, want.state)
		}
	}
	recs := []Record{{Kind: "deploy", Key: "deploy/site/2", Actor: "op", Detail: "target site revision 2"}, {Kind: "audit", Key: "audit/9", Detail: "[override] x"}}
	for i := 0; i < 2; i++ {
		c, err := a.Records(ctx, id, "node-b", recs)
		if err != nil || c.Added != 2*(1-i) || c.Duplicates != 2*i {
			t.Fatalf("records #%d: %+v %v", i, c, err)
		}
	}
	for i := 0; i < 2; i++ {
		epoch, err := a.Finish(ctx, id, "node-b", FinishSummary{LoserEpoch: loser.ClusterEpoch, Messages: 2})
		if err != nil || epoch != 4 {
			t.Fatalf("finish #%d: epoch %d %v, want 4 (above both sides)", i, epoch, err)
		}
	}
	kinds := auditKinds(t, f)
	for k, n := range map[string]int{KindBegin: 1, KindMerged: 1, KindDeploySuperseded: 1, KindPeerAudit: 1, "override": 1} {
		if kinds[k] != n {
			t.Errorf("audit has %d %s entries, want %d (all: %v)", kinds[k], k, n, kinds)
		}
	}
	if d, err := f.DeployTargets(); err != nil || len(d) != 0 {
		t.Errorf("a superseded deploy was applied: %v %v", d, err)
	}
}

func TestAbsorberRefusesWhenNotWinner(t *testing.T) {
	tests := []struct {
		name   string
		winner Facts
	}{
		{"rule picks the caller", Facts{NodeID: "node-a", Active: true, Voters: []string{"node-a"}, OverrideUnixNano: 30}},
		{"not active", Facts{NodeID: "node-a", Active: false, OverrideUnixNano: 1}},
		{"caller already a voter", Facts{NodeID: "node-a", Active: true, Voters: []string{"node-a", "node-b"}, OverrideUnixNano: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, f, _ := newWinner(t, tc.winner)
			_, _, err := a.Begin(context.Background(), "node-b-1", Facts{NodeID: "node-b", Active: true, OverrideUnixNano: 20})
			if !errors.Is(err, ErrNotWinner) {
				t.Fatalf("begin: %v, want ErrNotWinner", err)
			}
			if k := auditKinds(t, f); k[KindBegin] != 0 {
				t.Fatalf("a refused merge was recorded: %v", k)
			}
		})
	}
}
