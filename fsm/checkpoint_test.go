package fsm

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/scadad/scadad/fsm/fsmpb"
)

func checkpointCmd(voters ...string) *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_Checkpoint{Checkpoint: &fsmpb.Checkpoint{Voters: voters, Reason: "test"}}}
}

func reportCmd(index uint64, node, digest string) *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_CheckpointReport{CheckpointReport: &fsmpb.CheckpointReport{Index: index, NodeId: node, Digest: digest}}}
}

func takeDigest(t *testing.T, f *FSM, index uint64) string {
	t.Helper()
	select {
	case d := <-f.LocalDigests():
		if d.Err != nil {
			t.Fatalf("checkpoint %d digest: %v", d.Index, d.Err)
		}
		if d.Index != index {
			t.Fatalf("digest of checkpoint %d, want %d", d.Index, index)
		}
		return d.Digest
	case <-time.After(10 * time.Second):
		t.Fatalf("no digest of checkpoint %d", index)
	}
	return ""
}

// flipValue changes one byte of a stored message's value behind the FSM's
// back, the way a bad disk or a stray write would: bbolt still reads the
// file whole.
func flipValue(t *testing.T, f *FSM) {
	t.Helper()
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	err := f.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSF).Bucket(sfPending)
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v == nil {
				if sub := b.Bucket(k); sub != nil {
					sk, sv := sub.Cursor().First()
					if sk == nil {
						continue
					}
					nv := slices.Clone(sv)
					nv[len(nv)-1] ^= 0x40
					return sub.Put(sk, nv)
				}
				continue
			}
			nv := slices.Clone(v)
			nv[len(nv)-1] ^= 0x40
			return b.Put(k, nv)
		}
		return fmt.Errorf("no pending message to damage")
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointFindsTheDivergedNode: three nodes apply the same log; one
// had a byte of a stored message flipped. Each digests its state at the
// checkpoint's index (in a batch that goes on past it), and the reports
// give every node the same verdict naming the damaged one.
func TestCheckpointFindsTheDivergedNode(t *testing.T) {
	ids := []string{"node-a", "node-b", "witness"}
	nodes := map[string]*FSM{}
	for _, id := range ids {
		nodes[id] = openTestFSM(t)
	}
	w := newLogWriter(t)
	var before []*raft.Log
	for i := range 20 {
		before = append(before, w.cmd(enqueue(msg(fmt.Sprintf("m%d", i), "sink", "payload"))))
	}
	for _, id := range ids {
		nodes[id].ApplyBatch(before)
	}
	flipValue(t, nodes["node-b"])

	// One batch: an enqueue, the checkpoint, two more enqueues.
	batch := []*raft.Log{w.cmd(enqueue(msg("x1", "sink", "p"))), w.cmd(checkpointCmd(ids...)),
		w.cmd(enqueue(msg("x2", "sink", "p"))), w.cmd(enqueue(msg("x3", "sink", "p")))}
	cp := batch[1].Index
	// A reference that stops at the checkpoint: its whole state is the
	// state at that index.
	ref := openTestFSM(t)
	ref.ApplyBatch(before)
	ref.ApplyBatch(batch[:2])
	takeDigest(t, ref, cp)
	want := digest(t, ref)

	got := map[string]string{}
	for _, id := range ids {
		for i, r := range nodes[id].ApplyBatch(batch) {
			if err := r.(*Result).Err; err != nil {
				t.Fatalf("%s entry %d: %v", id, i, err)
			}
		}
		got[id] = takeDigest(t, nodes[id], cp)
	}
	if got["node-a"] != want || got["witness"] != want {
		t.Fatalf("healthy digests at %d: node-a %s witness %s, want the state's at that index %s", cp, got["node-a"], got["witness"], want)
	}
	if got["node-b"] == want {
		t.Fatal("the damaged node's digest matches the healthy ones")
	}
	var reports []*raft.Log
	for _, id := range ids {
		reports = append(reports, w.cmd(reportCmd(cp, id, got[id])))
	}
	var records []*fsmpb.CheckpointRecord
	for _, id := range ids {
		for _, l := range reports {
			mustOK(t, nodes[id], l)
		}
		recs, err := nodes[id].Checkpoints()
		if err != nil || len(recs) != 1 {
			t.Fatalf("%s checkpoints: %v %v", id, recs, err)
		}
		records = append(records, recs[0])
	}
	r := records[0]
	if r.Index != cp || r.MajorityDigest != want || !slices.Equal(r.Diverged, []string{"node-b"}) || r.Split {
		t.Fatalf("verdict %v, want majority %s and node-b diverged", r, want)
	}
	for i, o := range records[1:] {
		if !proto.Equal(r, o) {
			t.Fatalf("%s holds another record: %v vs %v", ids[i+1], o, r)
		}
	}
}

func TestCheckpointVerdicts(t *testing.T) {
	a, b := shaOf([]byte("a")), shaOf([]byte("b"))
	cases := []struct {
		name     string
		voters   []string
		reports  [][2]string
		majority string
		diverged []string
		split    bool
	}{
		{"one of three reported", []string{"n1", "n2", "w"}, [][2]string{{"n1", a}}, "", nil, false},
		{"two agree", []string{"n1", "n2", "w"}, [][2]string{{"n1", a}, {"w", a}}, a, nil, false},
		{"one of three differs", []string{"n1", "n2", "w"}, [][2]string{{"n1", a}, {"n2", b}, {"w", a}}, a, []string{"n2"}, false},
		{"the leader is the odd one", []string{"n1", "n2", "w"}, [][2]string{{"n1", b}, {"n2", a}, {"w", a}}, a, []string{"n1"}, false},
		{"pair agrees", []string{"n1", "n2"}, [][2]string{{"n1", a}, {"n2", a}}, a, nil, false},
		{"pair disagrees", []string{"n1", "n2"}, [][2]string{{"n1", a}, {"n2", b}}, "", nil, true},
		// A node rebuilt after the verdict reports again at the same
		// checkpoint: what the checkpoint found stands.
		{"a node's later report does not rewrite the split", []string{"n1", "n2"}, [][2]string{{"n1", b}, {"n2", a}, {"n1", a}}, "", nil, true},
		{"a node's later report does not rewrite the divergence", []string{"n1", "n2", "w"}, [][2]string{{"n1", a}, {"n2", b}, {"w", a}, {"n2", a}}, a, []string{"n2"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := openTestFSM(t)
			w := newLogWriter(t)
			cp := mustOK(t, f, w.cmd(checkpointCmd(c.voters...))).Index
			var res *Result
			for _, r := range c.reports {
				res = mustOK(t, f, w.cmd(reportCmd(cp, r[0], r[1])))
			}
			rec := res.Checkpoint.Record
			if rec.MajorityDigest != c.majority || !slices.Equal(rec.Diverged, c.diverged) || rec.Split != c.split {
				t.Fatalf("verdict majority=%q diverged=%v split=%v, want %q %v %v", rec.MajorityDigest, rec.Diverged, rec.Split, c.majority, c.diverged, c.split)
			}
		})
	}
}

func TestCheckpointRefusals(t *testing.T) {
	f := openTestFSM(t)
	w := newLogWriter(t)
	if r := applyOne(t, f, w.cmd(reportCmd(5, "n1", shaOf(nil)))); r.Err == nil {
		t.Fatal("a report for no checkpoint was accepted")
	}
	if r := applyOne(t, f, w.cmd(checkpointCmd())); r.Err == nil {
		t.Fatal("a checkpoint without voters was accepted")
	}
	if r := applyOne(t, f, w.cmd(checkpointCmd("n1", "n1"))); r.Err == nil {
		t.Fatal("a checkpoint naming a voter twice was accepted")
	}
	cp := mustOK(t, f, w.cmd(checkpointCmd("n1", "n2"))).Index
	if r := applyOne(t, f, w.cmd(reportCmd(cp, "n3", shaOf(nil)))); r.Err == nil {
		t.Fatal("a report from a non-voter was accepted")
	}
	if r := applyOne(t, f, w.cmd(reportCmd(cp, "n1", "not-hex"))); r.Err == nil {
		t.Fatal("a malformed digest was accepted")
	}
	for range CheckpointsKept + 3 {
		mustOK(t, f, w.cmd(checkpointCmd("n1")))
	}
	recs, err := f.Checkpoints()
	if err != nil || len(recs) != CheckpointsKept || recs[0].Index != w.index {
		t.Fatalf("kept %d checkpoints (newest %d), want %d (newest %d): %v", len(recs), recs[0].Index, CheckpointsKept, w.index, err)
	}
}

func TestDutyCycleKeepsItsShare(t *testing.T) {
	now := time.Unix(0, 0)
	var slept time.Duration
	d := newDutyCycle(0.25, func() time.Time { return now }, func(_ context.Context, s time.Duration) error {
		slept += s
		now = now.Add(s)
		return nil
	})
	for range 10 {
		now = now.Add(10 * time.Millisecond) // work
		if err := d.pause(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if slept != 300*time.Millisecond {
		t.Fatalf("slept %s for 100ms of work at a 25%% share, want 300ms", slept)
	}
	if newDutyCycle(0, time.Now, sleepCtx) != nil || newDutyCycle(1, time.Now, sleepCtx) != nil {
		t.Fatal("share 0 or 1 should not pace")
	}
}

// TestMetaPublishedMidBatchStaysPut: a batch holding a checkpoint is
// applied in two steps, and the meta published after the first is what a
// reader of Meta holds while the second runs; it must not change under
// the reader.
func TestMetaPublishedMidBatchStaysPut(t *testing.T) {
	f := openTestFSM(t)
	w := newLogWriter(t)
	stop := make(chan struct{})
	changed := make(chan string, 1)
	go func() {
		for {
			select {
			case <-stop:
				close(changed)
				return
			default:
			}
			// While p is the published meta, what it points to stays.
			p := f.meta.Load()
			first := *p
			for f.meta.Load() == p {
				if now := *p; now != first {
					changed <- fmt.Sprintf("a published meta changed from %+v to %+v", first, now)
					return
				}
				select {
				case <-stop:
					close(changed)
					return
				default:
				}
			}
		}
	}()
	for i := range 300 {
		batch := []*raft.Log{
			w.cmd(enqueue(msg(fmt.Sprintf("a-%d", i), "t", "x"))),
			w.cmd(checkpointCmd("n1")),
			w.cmd(enqueue(msg(fmt.Sprintf("b-%d", i), "t", "x"))),
		}
		for _, r := range f.ApplyBatch(batch) {
			if err := r.(*Result).Err; err != nil {
				t.Fatal(err)
			}
		}
		for len(f.LocalDigests()) > 0 {
			<-f.LocalDigests()
		}
	}
	close(stop)
	if msg, ok := <-changed; ok {
		t.Fatal(msg)
	}
}
