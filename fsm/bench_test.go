package fsm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm/fsmpb"
)

// BenchmarkApplyBatchEnqueue measures the FSM side of group-committed
// enqueues: one ApplyBatch of entriesPerBatch entries, each an SFEnqueue of
// msgsPerEntry 256-byte messages, with fsync on (the production setting).
// Encoding (leader side) is outside the timer.
func BenchmarkApplyBatchEnqueue(b *testing.B) {
	const entriesPerBatch = 64
	payload := make([]byte, 256)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	for _, perEntry := range []int{1, 16, 128} {
		for _, noSync := range []bool{false, true} {
			benchmarkApplyBatchEnqueue(b, fmt.Sprintf("msgs_per_entry=%d/nosync=%v", perEntry, noSync), perEntry, noSync, entriesPerBatch, payload,
				func(id int) string { return fmt.Sprintf("msg-%012d", id) })
		}
	}
	// Ids as 64 producers send them (scadabench's write phase): each
	// producer's own counter after a common prefix, so every batch inserts
	// into 64 places of the id index.
	prefix := fmt.Sprintf("w64-256-%d", int64(1764830000000000000))
	benchmarkApplyBatchEnqueue(b, "msgs_per_entry=16/nosync=true/ids=64-producers", 16, true, entriesPerBatch, payload,
		func(id int) string { return fmt.Sprintf("%s/%d/%d", prefix, id%64, id/64) })
}

func benchmarkApplyBatchEnqueue(b *testing.B, name string, perEntry int, noSync bool, entriesPerBatch int, payload []byte, idOf func(int) string) {
	b.Run(name, func(b *testing.B) {
		f, err := Open(filepath.Join(b.TempDir(), "state.db"), Options{Logger: zerolog.Nop(), NoSync: noSync})
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		var index uint64
		var id int
		logs := make([]*raft.Log, entriesPerBatch)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			for e := range logs {
				msgs := make([]*fsmpb.Message, perEntry)
				for m := range msgs {
					id++
					msgs[m] = &fsmpb.Message{Id: idOf(id), Target: fmt.Sprintf("target-%d", id%4), Payload: payload}
				}
				data, err := Encode(&fsmpb.Command{StampUnixNano: int64(id), Actor: "bench", Body: &fsmpb.Command_SfEnqueue{SfEnqueue: &fsmpb.SFEnqueue{Messages: msgs}}})
				if err != nil {
					b.Fatal(err)
				}
				index++
				logs[e] = &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}
			}
			b.StartTimer()
			for _, r := range f.ApplyBatch(logs) {
				if err := r.(*Result).Err; err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StopTimer()
		msgs := float64(b.N * entriesPerBatch * perEntry)
		b.ReportMetric(msgs/b.Elapsed().Seconds(), "msgs/s")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/msgs, "ns/msg")
	})
}

// BenchmarkSnapshotRestore measures streaming a snapshot of 100k pending
// 256-byte messages out (Backup) and back in (Restore, which verifies).
func BenchmarkSnapshotRestore(b *testing.B) {
	const messages, perEntry = 100_000, 1000
	src := openTestFSM(b)
	w := newLogWriter(b)
	payload := make([]byte, 256)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	var logs []*raft.Log
	for lo := 0; lo < messages; lo += perEntry {
		msgs := make([]*fsmpb.Message, perEntry)
		for i := range msgs {
			msgs[i] = &fsmpb.Message{Id: fmt.Sprintf("msg-%09d", lo+i), Target: "historian", Payload: payload}
		}
		logs = append(logs, w.cmd(enqueue(msgs...)))
	}
	for _, r := range src.ApplyBatch(logs) {
		if err := r.(*Result).Err; err != nil {
			b.Fatal(err)
		}
	}
	var snap bytes.Buffer
	if _, err := src.Backup(&snap); err != nil {
		b.Fatal(err)
	}
	dst := openTestFSM(b)
	b.Run("backup", func(b *testing.B) {
		for range b.N {
			if _, err := src.Backup(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(snap.Len()), "snapshot-bytes")
	})
	b.Run("restore", func(b *testing.B) {
		for range b.N {
			if err := dst.Restore(io.NopCloser(bytes.NewReader(snap.Bytes()))); err != nil {
				b.Fatal(err)
			}
		}
	})
	info, err := InspectSnapshot(bytes.NewReader(snap.Bytes()))
	if err != nil || info.Pending != messages {
		b.Fatalf("inspect: %+v %v", info, err)
	}
	b.Logf("state file %d bytes, snapshot %d bytes", info.StateBytes, snap.Len())
}

// BenchmarkHeldCommits compares committing the state file after every
// ApplyBatch with holding the entries for several batches
// (Options.CommitBytes plus Commit), the way the daemon runs: one entry per
// batch of 32 messages with random ids (the id index takes random leaves),
// bbolt without fsync (the daemon's DeferSync).
func BenchmarkHeldCommits(b *testing.B) {
	const perEntry = 32
	payload := make([]byte, 256)
	for _, every := range []int{1, 10} {
		b.Run(fmt.Sprintf("commit_every=%d", every), func(b *testing.B) {
			opts := Options{Logger: zerolog.Nop(), NoSync: true}
			if every > 1 {
				opts.CommitBytes = 64 << 20
			}
			f, err := Open(filepath.Join(b.TempDir(), "state.db"), opts)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			rng := rand.New(rand.NewPCG(1, 2))
			var index uint64
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				msgs := make([]*fsmpb.Message, perEntry)
				for m := range msgs {
					msgs[m] = &fsmpb.Message{Id: fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64()), Target: "t", Payload: payload}
				}
				data, err := Encode(&fsmpb.Command{StampUnixNano: int64(i), Actor: "bench", Body: &fsmpb.Command_SfEnqueue{SfEnqueue: &fsmpb.SFEnqueue{Messages: msgs}}})
				if err != nil {
					b.Fatal(err)
				}
				index++
				b.StartTimer()
				if err := f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}).(*Result).Err; err != nil {
					b.Fatal(err)
				}
				if (i+1)%every == 0 {
					if err := f.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			msgs := float64(b.N * perEntry)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/msgs, "ns/msg")
		})
	}
}

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
