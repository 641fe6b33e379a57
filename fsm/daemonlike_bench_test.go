package fsm

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm/fsmpb"
)

// BenchmarkHeldCommitsInterleaved applies what a leader sees from 64
// producers that name their own ids: entries of 16 messages whose ids
// interleave the producers' sequences (each producer's ids land in its own
// leaf of the id index), one target, bbolt without fsync (DeferSync), a
// commit every commit_every entries. A commit rewrites every leaf its
// entries touched, so the fewer commits, the fewer rewrites per message:
// commit_every=16 is the daemon's 50 ms at about 5,000 messages/s,
// commit_every=64 its 200 ms.
func BenchmarkHeldCommitsInterleaved(b *testing.B) {
	const perEntry, producers = 16, 64
	payload := make([]byte, 256)
	for _, commitEvery := range []int{16, 64} {
		b.Run(fmt.Sprintf("commit_every=%d", commitEvery), func(b *testing.B) {
			f, err := Open(filepath.Join(b.TempDir(), "state.db"), Options{Logger: zerolog.Nop(), NoSync: true, CommitBytes: 64 << 20})
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			next := make([]int, producers)
			var index uint64
			var p int
			entry := func(stamp int) *raft.Log {
				msgs := make([]*fsmpb.Message, perEntry)
				for m := range msgs {
					p = (p + 7) % producers
					next[p]++
					msgs[m] = &fsmpb.Message{Id: fmt.Sprintf("w64-256-1764665000000000000/%d/%d", p, next[p]), Target: "bench", Payload: payload}
				}
				data, err := Encode(&fsmpb.Command{StampUnixNano: int64(stamp), Actor: "node-a", Body: &fsmpb.Command_SfEnqueue{SfEnqueue: &fsmpb.SFEnqueue{Messages: msgs}}})
				if err != nil {
					b.Fatal(err)
				}
				index++
				return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				l := entry(i)
				b.StartTimer()
				if r := f.Apply(l).(*Result); r.Err != nil {
					b.Fatal(r.Err)
				}
				if (i+1)%commitEvery == 0 {
					if err := f.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perEntry), "ns/msg")
		})
	}
}
