package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/scadad/scadad/fsm/fsmpb"
)

func pendingIDs(t *testing.T, f *FSM, target string) []string {
	t.Helper()
	msgs, err := f.SFPending(target, 0, MaxListLimit)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	return ids
}

func parkedIDs(t *testing.T, f *FSM, target string) []string {
	t.Helper()
	msgs, err := f.SFParked(target, MaxListLimit)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	return ids
}

func TestSFEnqueueFIFOAndIdempotency(t *testing.T) {
	f, w := openTestFSM(t), newLogWriter(t)
	r := mustOK(t, f, w.cmd(enqueue(msg("a1", "A", "p"), msg("b1", "B", "p"), msg("a2", "A", "p"), msg("a1", "A", "again"))))
	wantItems := []EnqueueItem{{ID: "a1", Seq: 1}, {ID: "b1", Seq: 1}, {ID: "a2", Seq: 2}, {ID: "a1", Duplicate: true}}
	if !slices.Equal(r.Enqueue.Items, wantItems) || r.Enqueue.Added != 3 || r.Enqueue.Duplicates != 1 {
		t.Fatalf("outcome %+v", r.Enqueue)
	}
	mustOK(t, f, w.cmd(enqueue(msg("a3", "A", "p"))))

	if got := pendingIDs(t, f, "A"); !slices.Equal(got, []string{"a1", "a2", "a3"}) {
		t.Fatalf("pending A %v", got)
	}
	if none, err := f.SFPending("A", math.MaxUint64, 10); err != nil || len(none) != 0 {
		t.Fatalf("page after the last possible seq: %d messages, %v", len(none), err)
	}
	msgs, err := f.SFPending("A", 1, 1)
	if err != nil || len(msgs) != 1 || msgs[0].ID != "a2" || msgs[0].Seq != 2 {
		t.Fatalf("page after seq 1: %+v %v", msgs, err)
	}
	first, _ := f.SFPending("A", 0, 1)
	if string(first[0].Payload) != "p" || len(first[0].Headers) != 1 || first[0].Headers[0] != (Header{"content-type", "text/plain"}) ||
		first[0].EnqueuedAt.IsZero() || first[0].EnqueueActor != "test" {
		t.Fatalf("first message %+v", first[0])
	}

	// Delivered ids are removed and remembered.
	r = mustOK(t, f, w.cmd(delivered("a1", "a1", "never-seen")))
	if *r.Delivered != (DeliveredOutcome{Removed: 1, AlreadyDelivered: 1, Unknown: 1}) {
		t.Fatalf("delivered outcome %+v", r.Delivered)
	}
	r = mustOK(t, f, w.cmd(enqueue(msg("a1", "A", "late"), msg("never-seen", "A", "x"), msg("a4", "A", "p"))))
	if r.Enqueue.Added != 1 || !r.Enqueue.Items[0].Duplicate || !r.Enqueue.Items[1].Duplicate || r.Enqueue.Items[2].Seq != 4 {
		t.Fatalf("re-enqueue outcome %+v", r.Enqueue)
	}
	if got := pendingIDs(t, f, "A"); !slices.Equal(got, []string{"a2", "a3", "a4"}) {
		t.Fatalf("pending A %v", got)
	}

	for id, want := range map[string]MessageState{"a1": StateFinished, "a2": StatePending, "zz": StateUnknown, "never-seen": StateFinished} {
		got, err := f.SFLookup(id)
		if err != nil || got != want {
			t.Fatalf("lookup %s = %v %v, want %v", id, got, err, want)
		}
	}
	stats, err := f.SFStats()
	if err != nil {
		t.Fatal(err)
	}
	if a := stats["A"]; a.Pending != 3 || a.Delivered != 1 || a.OldestEnqueue.IsZero() {
		t.Fatalf("stats A %+v", a)
	}
	if b := stats["B"]; b.Pending != 1 {
		t.Fatalf("stats B %+v", b)
	}
	targets, _ := f.SFTargets()
	if !slices.Equal(targets, []string{"A", "B"}) {
		t.Fatalf("targets %v", targets)
	}
}

func TestSFEnqueueValidation(t *testing.T) {
	big := make([]byte, MaxPayloadBytes+1)
	tests := []struct {
		name string
		cmd  *fsmpb.Command
	}{
		{"empty batch", enqueue()},
		{"empty id", enqueue(msg("ok", "A", ""), msg("", "A", ""))},
		{"empty target", enqueue(msg("x", "", ""))},
		{"payload too big", enqueue(&fsmpb.Message{Id: "x", Target: "A", Payload: big})},
		{"id too long", enqueue(msg(string(make([]byte, MaxIDBytes+1)), "A", ""))},
		{"header without name", enqueue(&fsmpb.Message{Id: "x", Target: "A", Headers: []*fsmpb.KV{{Value: "v"}}})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, w := openTestFSM(t), newLogWriter(t)
			before := stateDigest(t, f)
			r := applyOne(t, f, w.cmd(tt.cmd))
			if !errors.Is(r.Err, ErrInvalid) {
				t.Fatalf("error %v, want invalid", r.Err)
			}
			if stateDigest(t, f) != before {
				t.Fatalf("refused enqueue changed state (all or nothing)")
			}
			if f.Meta().AppliedIndex != w.index {
				t.Fatalf("applied index %d, want %d", f.Meta().AppliedIndex, w.index)
			}
		})
	}
}

func TestSFParkRetryDiscard(t *testing.T) {
	f, w := openTestFSM(t), newLogWriter(t)
	mustOK(t, f, w.cmd(enqueue(msg("m1", "A", ""), msg("m2", "A", ""), msg("m3", "A", ""), msg("m4", "A", ""), msg("n1", "B", ""))))

	r := mustOK(t, f, w.cmd(park("m2", "HTTP 500", 5)))
	if r.Park.Target != "A" || r.Park.ParkSeq != 1 {
		t.Fatalf("park outcome %+v", r.Park)
	}
	mustOK(t, f, w.cmd(park("m3", "HTTP 400", 1)))
	mustOK(t, f, w.cmd(park("m4", "HTTP 400", 1)))
	for _, bad := range []string{"m2", "missing"} {
		if r := applyOne(t, f, w.cmd(park(bad, "again", 1))); !errors.Is(r.Err, ErrNotPending) {
			t.Fatalf("park %s: %v", bad, r.Err)
		}
	}
	if got := parkedIDs(t, f, "A"); !slices.Equal(got, []string{"m2", "m3", "m4"}) {
		t.Fatalf("parked %v", got)
	}
	parked, _ := f.SFParked("A", 1)
	if len(parked) != 1 || parked[0].Attempts != 5 || parked[0].ParkReason != "HTTP 500" || parked[0].ParkedAt.IsZero() {
		t.Fatalf("parked head %+v", parked)
	}

	// Retry one by id: back to the tail, attempts reset.
	r = mustOK(t, f, w.cmd(retry("", "m3", "m1", "m3")))
	if r.Retry.Moved != 1 || !slices.Equal(r.Retry.NotParked, []string{"m1", "m3"}) {
		t.Fatalf("retry outcome %+v", r.Retry)
	}
	if got := pendingIDs(t, f, "A"); !slices.Equal(got, []string{"m1", "m3"}) {
		t.Fatalf("pending after retry %v", got)
	}
	tail, _ := f.SFPending("A", 1, 10)
	if tail[0].ID != "m3" || tail[0].Attempts != 0 || tail[0].ParkReason != "" || tail[0].Seq != 5 {
		t.Fatalf("retried message %+v", tail[0])
	}

	// Discard all parked of A: gone, audited, remembered.
	r = mustOK(t, f, w.cmd(discard("A", "operator gave up")))
	if r.Discard.Moved != 2 || r.Discard.Remaining != 0 {
		t.Fatalf("discard outcome %+v", r.Discard)
	}
	if got := parkedIDs(t, f, "A"); len(got) != 0 {
		t.Fatalf("parked after discard %v", got)
	}
	if r := mustOK(t, f, w.cmd(enqueue(msg("m2", "A", "")))); !r.Enqueue.Items[0].Duplicate {
		t.Fatalf("discarded id re-enqueued as new")
	}
	entries, _ := f.Audit(0, 0)
	last := entries[len(entries)-1]
	if last.Kind != "sf.discard" || last.Detail != "2 message(s) of target A: m2, m4 (operator gave up)" {
		t.Fatalf("audit %+v", entries)
	}
	stats, _ := f.SFStats()
	if a := stats["A"]; a.Pending != 2 || a.Parked != 0 || a.Discarded != 2 {
		t.Fatalf("stats %+v", a)
	}

	for _, bad := range []*fsmpb.Command{retry(""), retry("A", "m1"), discard("", "")} {
		if r := applyOne(t, f, w.cmd(bad)); !errors.Is(r.Err, ErrInvalid) {
			t.Fatalf("bad selector %v: %v", bad, r.Err)
		}
	}
}

func TestSFRetryAllOfTargetIsBounded(t *testing.T) {
	f, w := openTestFSM(t), newLogWriter(t)
	n := MaxBulk + 5
	var ms []*fsmpb.Message
	for i := range n {
		ms = append(ms, msg(fmt.Sprintf("m%05d", i), "A", ""))
	}
	mustOK(t, f, w.cmd(enqueue(ms[:MaxEnqueueBatch]...)))
	mustOK(t, f, w.cmd(enqueue(ms[MaxEnqueueBatch:]...)))
	logs := make([]*raft.Log, 0, n)
	for _, m := range ms {
		logs = append(logs, w.cmd(park(m.Id, "down", 3)))
	}
	for _, res := range f.ApplyBatch(logs) {
		if err := res.(*Result).Err; err != nil {
			t.Fatal(err)
		}
	}
	r := mustOK(t, f, w.cmd(retry("A")))
	if r.Retry.Moved != MaxBulk || r.Retry.Remaining != 5 {
		t.Fatalf("first retry %+v", r.Retry.Moved)
	}
	r = mustOK(t, f, w.cmd(retry("A")))
	if r.Retry.Moved != 5 || r.Retry.Remaining != 0 {
		t.Fatalf("second retry moved %d remaining %d", r.Retry.Moved, r.Retry.Remaining)
	}
	got := pendingIDs(t, f, "A")
	if len(got) != n || got[0] != "m00000" || got[n-1] != ms[n-1].Id {
		t.Fatalf("pending after retries: %d, first %s", len(got), got[0])
	}
}

func TestSFDeliveredTombstonesAreBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("applies 100k deliveries")
	}
	f, w := openTestFSM(t), newLogWriter(t)
	total := DeliveredTombstones + 3
	var logs []*raft.Log
	for lo := 0; lo < total; lo += MaxBulk {
		var ids []string
		for i := lo; i < min(lo+MaxBulk, total); i++ {
			ids = append(ids, fmt.Sprintf("d%06d", i))
		}
		logs = append(logs, w.cmd(delivered(ids...)))
	}
	for _, res := range f.ApplyBatch(logs) {
		if err := res.(*Result).Err; err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range map[int]bool{0: false, 2: false, 3: true, total - 1: true} {
		has, err := f.SFHas(fmt.Sprintf("d%06d", i))
		if err != nil || has != want {
			t.Fatalf("SFHas(d%06d) = %v %v, want %v", i, has, err, want)
		}
	}
	var buf bytes.Buffer
	if _, err := f.Backup(&buf); err != nil {
		t.Fatal(err)
	}
	info, err := InspectSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if info.DeliveredTombstones != DeliveredTombstones {
		t.Fatalf("tombstones %d", info.DeliveredTombstones)
	}
}

func TestSFAttemptsRecordedOnPendingOnly(t *testing.T) {
	f, w := openTestFSM(t), newLogWriter(t)
	mustOK(t, f, w.cmd(enqueue(msg("m1", "A", "p1"), msg("m2", "A", "p2"), msg("m3", "A", "p3"))))
	mustOK(t, f, w.cmd(delivered("m3")))
	r := mustOK(t, f, w.cmd(attempts(
		&fsmpb.SFAttempt{Id: "m1", Attempts: 3, LastError: "target answered 503"},
		&fsmpb.SFAttempt{Id: "m3", Attempts: 1, LastError: "late"},
		&fsmpb.SFAttempt{Id: "never", Attempts: 1, LastError: "x"})))
	if *r.Attempts != (AttemptsOutcome{Recorded: 1, NotPending: 2}) {
		t.Fatalf("outcome %+v", r.Attempts)
	}
	msgs, _ := f.SFPending("A", 0, 10)
	if len(msgs) != 2 || msgs[0].Attempts != 3 || msgs[0].LastError != "target answered 503" || msgs[0].LastAttemptAt.IsZero() ||
		string(msgs[0].Payload) != "p1" || msgs[0].Seq != 1 || msgs[1].Attempts != 0 || msgs[1].LastError != "" {
		t.Fatalf("pending %+v", msgs)
	}
	// Park keeps the count it is given and the reason as the last error;
	// retry starts both again.
	mustOK(t, f, w.cmd(park("m1", "target answered 400: bad", 4)))
	parked, _ := f.SFParked("A", 10)
	if len(parked) != 1 || parked[0].Attempts != 4 || parked[0].LastError != "target answered 400: bad" {
		t.Fatalf("parked %+v", parked)
	}
	if r := mustOK(t, f, w.cmd(attempts(&fsmpb.SFAttempt{Id: "m1", Attempts: 9, LastError: "y"}))); r.Attempts.NotPending != 1 {
		t.Fatalf("attempts of a parked message recorded: %+v", r.Attempts)
	}
	mustOK(t, f, w.cmd(retry("", "m1")))
	msgs, _ = f.SFPending("A", 0, 10)
	if len(msgs) != 2 || msgs[1].ID != "m1" || msgs[1].Attempts != 0 || msgs[1].LastError != "" || !msgs[1].LastAttemptAt.IsZero() {
		t.Fatalf("retried %+v", msgs)
	}
	// Refused whole when any entry is bad; nothing changes.
	for _, bad := range []*fsmpb.Command{
		attempts(),
		attempts(&fsmpb.SFAttempt{Id: "m2", Attempts: 1}, &fsmpb.SFAttempt{Id: "", Attempts: 1}),
		attempts(&fsmpb.SFAttempt{Id: "m2", Attempts: 1, LastError: strings.Repeat("e", MaxTextBytes+1)}),
	} {
		if r := applyOne(t, f, w.cmd(bad)); !errors.Is(r.Err, ErrInvalid) {
			t.Fatalf("bad attempts %v: %v", bad, r.Err)
		}
	}
	if msgs, _ := f.SFPending("A", 0, 10); msgs[0].ID != "m2" || msgs[0].Attempts != 0 {
		t.Fatalf("a refused SFAttempts changed the state: %+v", msgs[0])
	}
}

// SFBirth counts a target's Sparkplug sessions: the count goes on from
// the stored counters (a new Active continues it), per target, and
// is refused without a target.
func TestSFBirthCountsPerTarget(t *testing.T) {
	f, w := openTestFSM(t), newLogWriter(t)
	birth := func(target string) *fsmpb.Command {
		return &fsmpb.Command{Body: &fsmpb.Command_SfBirth{SfBirth: &fsmpb.SFBirth{Target: target}}}
	}
	for want := uint64(1); want <= 3; want++ {
		if r := mustOK(t, f, w.cmd(birth("edge"))); r.Birth == nil || r.Birth.Births != want {
			t.Fatalf("birth %d of edge: %+v", want, r.Birth)
		}
	}
	if r := mustOK(t, f, w.cmd(birth("other"))); r.Birth.Births != 1 {
		t.Fatalf("first birth of another target: %+v", r.Birth)
	}
	mustOK(t, f, w.cmd(enqueue(msg("m1", "edge", "p1"))))
	if r := mustOK(t, f, w.cmd(birth("edge"))); r.Birth.Births != 4 {
		t.Fatalf("birth after an enqueue: %+v", r.Birth)
	}
	if r := applyOne(t, f, w.cmd(birth(""))); r.Err == nil {
		t.Fatal("a birth of no target applied")
	}
}

// TestIDsChangedEarlierInTheBatchAreSeen applies, in one batch (one bbolt
// transaction, so the id lookups' cursors outlive the changes), an enqueue
// of many ids, their delivery, and enqueues of the same ids again: each
// must be a duplicate, found among the delivered ids although the id index
// changed under the cursor in between; an id new to the batch still goes in.
func TestIDsChangedEarlierInTheBatchAreSeen(t *testing.T) {
	f, w := openTestFSM(t), newLogWriter(t)
	var ms []*fsmpb.Message
	var ids []string
	for i := range 300 { // enough to split the id index's pages
		id := fmt.Sprintf("p/%d/%d", i%7, i)
		ms = append(ms, msg(id, "A", "p"))
		ids = append(ids, id)
	}
	logs := []*raft.Log{
		w.cmd(enqueue(ms...)),
		w.cmd(delivered(ids...)),
		w.cmd(enqueue(append(slices.Clone(ms), msg("fresh", "A", "p"))...)),
		w.cmd(enqueue(msg("fresh", "A", "again"))),
	}
	res := f.ApplyBatch(logs)
	for i, r := range res {
		if err := r.(*Result).Err; err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	if got := res[1].(*Result).Delivered.Removed; got != len(ids) {
		t.Fatalf("delivered removed %d, want %d", got, len(ids))
	}
	again := res[2].(*Result).Enqueue
	if again.Duplicates != len(ids) || again.Added != 1 || again.Items[len(ids)].Duplicate {
		t.Fatalf("re-enqueue after delivery in the same batch: added %d duplicates %d, want 1 and %d", again.Added, again.Duplicates, len(ids))
	}
	if last := res[3].(*Result).Enqueue; !last.Items[0].Duplicate {
		t.Fatalf("an id enqueued earlier in the batch was stored again")
	}
	if got := pendingIDs(t, f, "A"); !slices.Equal(got, []string{"fresh"}) {
		t.Fatalf("pending A %v, want [fresh]", got)
	}
}

// An enqueue batch's records are marshalled into shared blocks that bbolt
// holds until the commit: many entries in one ApplyBatch, whose records
// fill several blocks (and one too large for a block), each read back as
// it was sent, in its place, after the commit and after a reopen.
func TestBatchedEnqueueRecordsReadBackIntact(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	f := openTestFSMAt(t, path)
	w := newLogWriter(t)
	payloadOf := func(i int) string {
		switch i {
		case 0:
			return strings.Repeat("F", 2*firstArenaChunk+100) // past the first two blocks
		case 1:
			return strings.Repeat("S", firstArenaChunk+100) // past the first
		case 77:
			return strings.Repeat("L", maxArenaChunk) // past the largest
		}
		return strings.Repeat(string(rune('a'+i%26)), 1+i*37%900)
	}
	var logs []*raft.Log
	var want []string
	for e := range 20 {
		var msgs []*fsmpb.Message
		for m := range 16 {
			i := e*16 + m
			id := fmt.Sprintf("producer-%d/%d", i%7, i)
			msgs = append(msgs, msg(id, "T", payloadOf(i)))
			want = append(want, id)
		}
		logs = append(logs, w.cmd(enqueue(msgs...)))
	}
	for i, r := range f.ApplyBatch(logs) {
		if err := r.(*Result).Err; err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	check := func(how string) {
		t.Helper()
		got, err := f.SFPending("T", 0, MaxListLimit)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d pending, want %d", how, len(got), len(want))
		}
		for i, m := range got {
			if m.ID != want[i] || m.Seq != uint64(i+1) || string(m.Payload) != payloadOf(i) {
				t.Fatalf("%s: message %d is %q seq %d with %d payload bytes; want %q seq %d with %d",
					how, i, m.ID, m.Seq, len(m.Payload), want[i], i+1, len(payloadOf(i)))
			}
			if s, err := f.SFLookup(m.ID); err != nil || s != StatePending {
				t.Fatalf("%s: %q indexed as %v, %v", how, m.ID, s, err)
			}
		}
	}
	check("applied")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = openTestFSMAt(t, path)
	defer f.Close()
	check("reopened")
}

// take hands out room for any size, and no two takes share a byte.
func TestArenaTakesNeverOverlap(t *testing.T) {
	a := &applier{}
	rng := rand.New(rand.NewPCG(3, 4))
	var taken [][]byte
	for range 2000 {
		n := rng.IntN(3 * maxArenaChunk / 8)
		if rng.IntN(4) == 0 {
			n = rng.IntN(64)
		}
		b := a.take(n)
		if len(b) != 0 || cap(b) != n {
			t.Fatalf("take(%d): len %d cap %d", n, len(b), cap(b))
		}
		taken = append(taken, b[:n])
	}
	for i, b := range taken {
		for j := range b {
			b[j] = byte(i)
		}
	}
	for i, b := range taken {
		for j := range b {
			if b[j] != byte(i) {
				t.Fatalf("take %d (%d bytes) overwritten at byte %d by take %d", i, len(b), j, b[j])
			}
		}
	}
}
