package fsm

import (
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
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
	a, b := openTestFSM(f), openTestFSM(f)
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
