package fsm

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"github.com/scadad/scadad/fsm/fsmpb"
)

// randomLog builds a seeded mix of valid, refused and undecodable entries
// over small id pools, so commands collide: duplicates, CAS conflicts,
// park/retry of things that moved, configuration entries in between.
func randomLog(t testing.TB, seed uint64, n int) []*raft.Log {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	w := newLogWriter(t)
	targets := []string{"historian", "mes", "erp"}
	id := func() string { return fmt.Sprintf("msg-%d", rng.IntN(300)) }
	var artifacts []string
	var logs []*raft.Log
	for len(logs) < n {
		switch k := rng.IntN(20); {
		case k < 7:
			var ms []*fsmpb.Message
			for range 1 + rng.IntN(8) {
				ms = append(ms, msg(id(), targets[rng.IntN(len(targets))], fmt.Sprintf("payload %d", rng.Int())))
			}
			logs = append(logs, w.cmd(enqueue(ms...)))
		case k < 10:
			var ids []string
			for range 1 + rng.IntN(5) {
				ids = append(ids, id())
			}
			logs = append(logs, w.cmd(delivered(ids...)))
		case k < 12:
			logs = append(logs, w.cmd(park(id(), "HTTP 503", uint32(rng.IntN(10)))))
		case k == 12:
			if rng.IntN(2) == 0 {
				logs = append(logs, w.cmd(retry(targets[rng.IntN(len(targets))])))
			} else {
				logs = append(logs, w.cmd(retry("", id(), id())))
			}
		case k == 13:
			logs = append(logs, w.cmd(discard(targets[rng.IntN(len(targets))], "stale")))
		case k == 14:
			data := []byte(fmt.Sprintf("config %d", rng.IntN(5)))
			sha := shaOf(data)
			parts := chunks(data, 2)
			if rng.IntN(4) == 0 {
				parts[1] = []byte("corrupt")
			}
			logs = append(logs, w.cmd(putChunk(sha, 0, 2, parts[0])), w.cmd(putChunk(sha, 1, 2, parts[1])),
				w.cmd(commitArtifact(sha, uint64(len(data)), 2)))
			artifacts = append(artifacts, sha)
		case k == 15 && len(artifacts) > 0:
			logs = append(logs, w.cmd(deploy("site", uint64(rng.IntN(6)), artifacts[rng.IntN(len(artifacts))], "push", 0)))
		case k == 16:
			logs = append(logs, w.cmd(deployAck("site", fmt.Sprintf("node-%d", rng.IntN(2)), uint64(1+rng.IntN(4)), rng.IntN(2) == 0, "")))
		case k == 17:
			logs = append(logs, w.cmd(setEpoch(uint64(rng.IntN(10)), "node-a", "override")))
		case k == 18:
			garbage := make([]byte, rng.IntN(40))
			for i := range garbage {
				garbage[i] = byte(rng.Uint32())
			}
			logs = append(logs, w.raw(garbage))
		default:
			w.index++
			logs = append(logs, &raft.Log{Index: w.index, Term: w.term, Type: raft.LogConfiguration, Data: []byte("cfg")})
			w.term += uint64(rng.IntN(2))
		}
	}
	return logs
}

func applyInBatches(t testing.TB, f *FSM, logs []*raft.Log, rng *rand.Rand) []*Result {
	t.Helper()
	var out []*Result
	for len(logs) > 0 {
		n := min(len(logs), 1+rng.IntN(64))
		for _, r := range f.ApplyBatch(logs[:n]) {
			out = append(out, r.(*Result))
		}
		logs = logs[n:]
	}
	return out
}

func TestSameLogSameState(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			logs := randomLog(t, seed, 1500)
			a, b := openTestFSM(t), openTestFSM(t)
			resA := applyInBatches(t, a, logs, rand.New(rand.NewPCG(seed, 7)))
			var resB []*Result
			for _, l := range logs {
				resB = append(resB, applyOne(t, b, l))
			}
			refused := 0
			for i := range logs {
				if !reflect.DeepEqual(resA[i], resB[i]) {
					t.Fatalf("entry %d: results differ:\n%+v\n%+v", logs[i].Index, resA[i], resB[i])
				}
				if resA[i].Err != nil {
					refused++
				}
			}
			if refused == 0 || refused == len(logs) {
				t.Fatalf("log exercises nothing: %d of %d refused", refused, len(logs))
			}
			if da, db := digest(t, a), digest(t, b); da != db {
				t.Fatalf("digests differ: %s vs %s", da, db)
			}
			last := logs[len(logs)-1]
			if m := a.Meta(); m.AppliedIndex != last.Index || m.AppliedTerm != last.Term {
				t.Fatalf("meta %+v, last entry %d/%d", m, last.Index, last.Term)
			}
			// The snapshot bodies carry the same state too.
			ia, ib := inspect(t, a), inspect(t, b)
			if ia.Digest != ib.Digest || ia.Digest != digest(t, a) || ia.Pending != ib.Pending {
				t.Fatalf("snapshot info differs:\n%+v\n%+v", ia, ib)
			}
		})
	}
}

func inspect(t testing.TB, f *FSM) SnapshotInfo {
	t.Helper()
	var buf bytes.Buffer
	if _, err := f.Backup(&buf); err != nil {
		t.Fatal(err)
	}
	info, err := InspectSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func TestEntriesAtOrBelowAppliedIndexAreSkipped(t *testing.T) {
	logs := randomLog(t, 11, 400)
	f := openTestFSM(t)
	applyInBatches(t, f, logs[:300], rand.New(rand.NewPCG(1, 1)))
	mid := digest(t, f)

	// Reopen: the applied index survived, and a replay from the start
	// (what raft does after a restart without restoring a snapshot) only
	// applies what is new.
	path := f.Path()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Meta().AppliedIndex != logs[299].Index || digest(t, f) != mid {
		t.Fatalf("reopened at %d, digest changed", f.Meta().AppliedIndex)
	}
	res := f.ApplyBatch(logs[100:300])
	for _, r := range res {
		if !r.(*Result).Skipped {
			t.Fatalf("entry %d re-applied", r.(*Result).Index)
		}
	}
	if digest(t, f) != mid {
		t.Fatalf("replay changed state")
	}
	// A batch straddling the applied index applies only its new part.
	res = f.ApplyBatch(logs[250:])
	for i, r := range res {
		if skipped := r.(*Result).Skipped; skipped != (i < 50) {
			t.Fatalf("entry %d skipped=%v", r.(*Result).Index, skipped)
		}
	}
	ref := openTestFSM(t)
	applyInBatches(t, ref, logs, rand.New(rand.NewPCG(2, 2)))
	if digest(t, f) != digest(t, ref) {
		t.Fatalf("replayed node diverged from a node that applied once")
	}
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	logs := randomLog(t, 21, 600)
	a := openTestFSM(t)
	applyInBatches(t, a, logs[:400], rand.New(rand.NewPCG(1, 1)))
	atSnapshot := digest(t, a)
	snap, err := a.OpenSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Writes continue while the snapshot is open; it still shows its moment.
	applyInBatches(t, a, logs[400:], rand.New(rand.NewPCG(1, 1)))
	var buf bytes.Buffer
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	snap.Release() // idempotent

	b := openTestFSM(t)
	mustOK(t, b, newLogWriter(t).cmd(audit("local", "state that the restore must discard")))
	changes, stop := b.Changes()
	defer stop()
	<-changes
	if err := b.Restore(io.NopCloser(bytes.NewReader(buf.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if digest(t, b) != atSnapshot {
		t.Fatalf("restored state differs from the snapshot's moment")
	}
	if got := <-changes; got != logs[399].Index {
		t.Fatalf("change notification %d, want %d", got, logs[399].Index)
	}
	// The restored node continues with the rest of the log and converges.
	applyInBatches(t, b, logs[400:], rand.New(rand.NewPCG(3, 3)))
	if digest(t, a) != digest(t, b) {
		t.Fatalf("restored node diverged after the remaining log")
	}
	if _, err := os.Stat(b.Path() + ".restore"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("restore left its temp file: %v", err)
	}
}

func TestRestoreRefusesCorruptSnapshots(t *testing.T) {
	src := openTestFSM(t)
	applyInBatches(t, src, randomLog(t, 31, 300), rand.New(rand.NewPCG(1, 1)))
	var buf bytes.Buffer
	if _, err := src.Backup(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	flip := func(at int) []byte {
		b := bytes.Clone(good)
		b[at] ^= 0x01
		return b
	}
	notBolt := frame(t, []byte("this is not a bbolt file, just bytes that compress"))
	wrongLen := bytes.Clone(good)
	copy(wrongLen[16:20], []byte{0xff, 0xff, 0xff, 0xff})

	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"header only", good[:16]},
		{"truncated in the body", good[:len(good)/2]},
		{"truncated before the digest", good[:len(good)-20]},
		{"one byte short", good[:len(good)-1]},
		{"bad magic", flip(0)},
		{"unknown format", flip(11)},
		{"flipped body byte", flip(len(good) / 2)},
		{"flipped digest byte", flip(len(good) - 1)},
		{"flipped total", flip(len(good) - 33)},
		{"absurd frame length", wrongLen},
		{"valid stream of something else", notBolt},
		{"one byte after the end marker", append(bytes.Clone(good), 0)},
		{"two snapshots concatenated", append(bytes.Clone(good), good...)},
		{"a state page corrupted before framing", reframedCorrupt(t, good)},
	}
	dst := openTestFSM(t)
	w := newLogWriter(t)
	mustOK(t, dst, w.cmd(enqueue(msg("keep", "A", "me"))))
	before := digest(t, dst)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := dst.Restore(io.NopCloser(bytes.NewReader(tt.data)))
			if !errors.Is(err, ErrSnapshotCorrupt) {
				t.Fatalf("restore error %v, want ErrSnapshotCorrupt", err)
			}
			if digest(t, dst) != before {
				t.Fatalf("refused restore changed state")
			}
			if _, err := os.Stat(dst.Path() + ".restore"); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("temp file left behind: %v", err)
			}
			if _, err := InspectSnapshot(bytes.NewReader(tt.data)); !errors.Is(err, ErrSnapshotCorrupt) {
				t.Fatalf("inspect error %v", err)
			}
		})
	}
	// Still a working node.
	mustOK(t, dst, w.cmd(enqueue(msg("after", "A", ""))))
	if has, _ := dst.SFHas("keep"); !has {
		t.Fatalf("lost state")
	}
	// And the good stream does restore.
	if err := dst.Restore(io.NopCloser(bytes.NewReader(good))); err != nil {
		t.Fatal(err)
	}
	if digest(t, dst) != digest(t, src) {
		t.Fatalf("good snapshot did not restore")
	}
}

// reframedCorrupt is what a sender with a corrupt page in its state file
// streams: the framing and its SHA-256 are computed over the corrupt bytes,
// so only the state digest the snapshot carries can tell.
func reframedCorrupt(t *testing.T, good []byte) []byte {
	t.Helper()
	var state bytes.Buffer
	if _, err := decodeSnapshot(bytes.NewReader(good), &state); err != nil {
		t.Fatal(err)
	}
	b := state.Bytes()
	// A byte inside the last page that holds data: a value, not bbolt's
	// page header, so bbolt's own check need not notice.
	at := -1
	for i := len(b) - 1; i > 4*4096; i-- {
		if b[i] != 0 {
			at = i
			break
		}
	}
	if at < 0 {
		t.Fatal("no data byte to corrupt")
	}
	b[at] ^= 0x20
	return frameState(t, b, good)
}

// frame wraps arbitrary bytes in a well-formed snapshot stream.
func frame(t *testing.T, body []byte) []byte {
	t.Helper()
	return frameWithDigest(t, body, make([]byte, sha256.Size))
}

// frameState frames a state file with the state digest of the stream good.
func frameState(t *testing.T, state, good []byte) []byte {
	t.Helper()
	return frameWithDigest(t, state, good[len(good)-sha256.Size:])
}

func frameWithDigest(t *testing.T, body, stateDigest []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	out.WriteString(snapshotMagic)
	out.Write([]byte{0, 0, 0, SnapshotFormat, 0, 0, 0, 0})
	fw := &frameWriter{w: &out, h: newSHA(), buf: make([]byte, 0, frameSize)}
	gz := newGzip(fw)
	gz.Write(body)
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(stateDigest); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestMalformedCommandsChangeNothing(t *testing.T) {
	valid, _ := Encode(noop())
	v99 := &fsmpb.Command{Version: 99, Body: &fsmpb.Command_Noop{Noop: &fsmpb.Noop{}}}
	v99bytes, _ := protoMarshal(v99)
	noBody, _ := protoMarshal(&fsmpb.Command{Version: 1})
	unknownBody := append(bytes.Clone(valid[:2]), 0xfa, 0x01, 0x00) // version + field 31 (not a body)
	tests := []struct {
		name string
		data []byte
		code Code
	}{
		{"garbage", []byte{0xff, 0xff, 0xff}, CodeDecode},
		{"truncated varint", valid[:1], CodeDecode},
		{"empty", nil, CodeUnsupportedVersion},
		{"future version", v99bytes, CodeUnsupportedVersion},
		{"no body", noBody, CodeDecode},
		{"unknown body field", unknownBody, CodeDecode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := openTestFSM(t), openTestFSM(t)
			wa, wb := newLogWriter(t), newLogWriter(t)
			mustOK(t, a, wa.cmd(enqueue(msg("m", "A", ""))))
			mustOK(t, b, wb.cmd(enqueue(msg("m", "A", ""))))
			before := stateDigest(t, a)
			ra, rb := applyOne(t, a, wa.raw(tt.data)), applyOne(t, b, wb.raw(tt.data))
			var ce *CommandError
			if !errors.As(ra.Err, &ce) || ce.Code != tt.code {
				t.Fatalf("error %v, want code %s", ra.Err, tt.code)
			}
			if ra.Err.Error() != rb.Err.Error() {
				t.Fatalf("nodes disagree: %q vs %q", ra.Err, rb.Err)
			}
			if stateDigest(t, a) != before || a.Meta().AppliedIndex != wa.index {
				t.Fatalf("malformed entry changed state or did not advance the index")
			}
			if digest(t, a) != digest(t, b) {
				t.Fatalf("nodes diverged")
			}
		})
	}
}

func TestNonCommandEntriesOnlyAdvanceIndex(t *testing.T) {
	f := openTestFSM(t)
	before := stateDigest(t, f)
	res := f.ApplyBatch([]*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("garbage that is not a command")},
		{Index: 2, Term: 2, Type: raft.LogNoop},
	})
	for _, r := range res {
		if r.(*Result).Err != nil {
			t.Fatal(r.(*Result).Err)
		}
	}
	if m := f.Meta(); m.AppliedIndex != 2 || m.AppliedTerm != 2 || stateDigest(t, f) != before {
		t.Fatalf("meta %+v", m)
	}
}

func TestChangesAreCoalesced(t *testing.T) {
	f, w := openTestFSM(t), newLogWriter(t)
	ch, stop := f.Changes()
	if got := <-ch; got != 0 {
		t.Fatalf("initial %d", got)
	}
	for range 3 {
		mustOK(t, f, w.cmd(noop()))
	}
	if got := <-ch; got != 3 {
		t.Fatalf("coalesced %d, want 3", got)
	}
	select {
	case v := <-ch:
		t.Fatalf("extra notification %d", v)
	default:
	}
	stop()
	stop()
	mustOK(t, f, w.cmd(noop()))
	select {
	case v := <-ch:
		t.Fatalf("notification %d after stop", v)
	default:
	}
}

func TestClosedFSM(t *testing.T) {
	f := openTestFSM(t)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second close %v", err)
	}
	r := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand}).(*Result)
	if !errors.Is(r.Err, ErrClosed) {
		t.Fatalf("apply after close %v", r.Err)
	}
	if _, err := f.SFPending("A", 0, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after close %v", err)
	}
	if _, err := f.Snapshot(); !errors.Is(err, ErrClosed) {
		t.Fatalf("snapshot after close %v", err)
	}
}

// A record the FSM cannot read is a storage failure: the batch is not
// applied (the index does not move), the FSM refuses everything after it
// and says so through Err, so the node stops rather than diverges.
func TestStorageFailureStopsTheFSM(t *testing.T) {
	f, w := openTestFSM(t), newLogWriter(t)
	mustOK(t, f, w.cmd(enqueue(msg("m1", "A", ""))))
	err := f.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSF).Bucket(sfIDs).Put([]byte("m1"), []byte{0xff, 0xff})
	})
	if err != nil {
		t.Fatal(err)
	}
	before := f.Meta()
	res := f.ApplyBatch([]*raft.Log{w.cmd(noop()), w.cmd(delivered("m1"))})
	for _, r := range res {
		var se *StorageError
		if !errors.As(r.(*Result).Err, &se) {
			t.Fatalf("entry %d: %v, want StorageError", r.(*Result).Index, r.(*Result).Err)
		}
	}
	if f.Meta() != before {
		t.Fatalf("failed batch moved meta to %+v", f.Meta())
	}
	if f.Err() == nil {
		t.Fatal("Err is nil after a storage failure")
	}
	if r := f.Apply(w.cmd(noop())).(*Result); !errors.Is(r.Err, f.Err()) {
		t.Fatalf("entry after the failure: %v", r.Err)
	}
}
