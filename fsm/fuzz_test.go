package fsm

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/scadad/scadad/fsm/fsmpb"
)

// FuzzDecode feeds arbitrary bytes to Decode and to two FSMs as log entries:
// nothing may panic, a decodable command must survive re-encoding, and both
// FSMs must reach the same results and state.
// Run: go test ./fsm -run '^$' -fuzz FuzzDecode -fuzztime 30s
func FuzzDecode(f *testing.F) {
	w := newLogWriter(f)
	sha := shaOf([]byte("x"))
	for _, c := range [][]byte{
		mustEncode(f, noop()),
		mustEncode(f, putChunk(sha, 0, 1, []byte("x"))),
		mustEncode(f, commitArtifact(sha, 1, 1)),
		mustEncode(f, deploy("site", 0, sha, "m", 0)),
		mustEncode(f, deployAck("site", "a", 1, true, "")),
		mustEncode(f, enqueue(msg("id", "t", "payload"), msg("id", "t", "dup"))),
		mustEncode(f, delivered("id", "other")),
		mustEncode(f, park("id", "r", 3)),
		mustEncode(f, retry("t")),
		mustEncode(f, discard("", "r", "id")),
		mustEncode(f, audit("k", "d")),
		mustEncode(f, setEpoch(2, "n", "r")),
		{},
		{0xff, 0x00},
	} {
		f.Add(c)
	}
	root := f.TempDir()
	open := func(t testing.TB) *FSM {
		dir, err := os.MkdirTemp(root, "fsm")
		if err != nil {
			t.Fatal(err)
		}
		fsm, err := Open(filepath.Join(dir, "state.db"), Options{Logger: zerolog.Nop(), NoSync: true})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		return fsm
	}
	a, b := open(f), open(f)
	f.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	// Fuzz workers are separate processes, each with its own pair; within
	// one the index grows with every input.
	f.Fuzz(func(t *testing.T, data []byte) {
		if cmd, err := Decode(data); err == nil {
			again, err := Encode(cmd)
			if err != nil {
				t.Fatalf("decoded command does not encode: %v", err)
			}
			back, err := Decode(again)
			if err != nil || !proto.Equal(cmd, back) {
				t.Fatalf("round trip changed the command: %v", err)
			}
		}
		l := w.raw(data)
		ra := applyOne(t, a, l)
		rb := b.ApplyBatch([]*raft.Log{l})[0].(*Result)
		if !reflect.DeepEqual(ra, rb) {
			t.Fatalf("results differ:\n%+v\n%+v", ra, rb)
		}
		if digest(t, a) != digest(t, b) {
			t.Fatalf("state diverged")
		}
		if blocked := a.ApplyBlocked(); blocked != nil {
			// An entry above this build's feature level stops applying
			// (fail-stop), on both nodes alike and at that entry; the pair
			// applies nothing more, so the next input gets a new one.
			if !reflect.DeepEqual(blocked, b.ApplyBlocked()) {
				t.Fatalf("blocked differently: %v and %v", blocked, b.ApplyBlocked())
			}
			if blocked.Index != l.Index || a.Meta().AppliedIndex >= l.Index {
				t.Fatalf("blocked at entry %d with %d applied, want blocked at %d with it unapplied", blocked.Index, a.Meta().AppliedIndex, l.Index)
			}
			_ = a.Close()
			_ = b.Close()
			a, b = open(t), open(t)
			return
		}
		if a.Meta().AppliedIndex != l.Index {
			t.Fatalf("applied index %d, want %d", a.Meta().AppliedIndex, l.Index)
		}
	})
}

func mustEncode(tb testing.TB, c *fsmpb.Command) []byte {
	tb.Helper()
	c.StampUnixNano, c.Actor = 1_700_000_000_000_000_000, "fuzz"
	data, err := Encode(c)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// FuzzSnapshot feeds arbitrary bytes to InspectSnapshot and Restore, as a
// backup file or a peer's InstallSnapshot stream reaches them: nothing may
// panic, a refused stream leaves the state as it was, and a stream both
// accept holds the state InspectSnapshot described.
// Run: go test ./fsm -run '^$' -fuzz FuzzSnapshot -fuzztime 30s
func FuzzSnapshot(f *testing.F) {
	src := openTestFSM(f)
	w := newLogWriter(f)
	mustOK(f, src, w.cmd(enqueue(msg("a", "t", "payload"), msg("b", "t", "more"))))
	mustOK(f, src, w.cmd(audit("k", "d")))
	var good bytes.Buffer
	if _, err := src.Backup(&good); err != nil {
		f.Fatal(err)
	}
	g := good.Bytes()
	f.Add(g)
	f.Add(g[:len(g)/2])
	f.Add(append(bytes.Clone(g), g...))
	f.Add(g[:16])
	dst := openTestFSM(f)
	dw := newLogWriter(f)
	mustOK(f, dst, dw.cmd(enqueue(msg("keep", "t", "me"))))
	f.Fuzz(func(t *testing.T, data []byte) {
		before := digest(t, dst)
		info, inspectErr := InspectSnapshot(bytes.NewReader(data))
		restoreErr := dst.Restore(io.NopCloser(bytes.NewReader(data)))
		switch {
		case restoreErr != nil:
			if got := digest(t, dst); got != before {
				t.Fatalf("a refused restore (%v) changed the state", restoreErr)
			}
		case inspectErr != nil:
			t.Fatalf("restore accepted what inspect refused: %v", inspectErr)
		case digest(t, dst) != info.Digest:
			t.Fatalf("restored state %s, inspect described %s", digest(t, dst), info.Digest)
		}
		if restoreErr == nil {
			// Back to the state the next input starts from.
			if err := dst.Restore(io.NopCloser(bytes.NewReader(g))); err != nil {
				t.Fatal(err)
			}
		}
	})
}
