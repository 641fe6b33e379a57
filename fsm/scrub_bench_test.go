//go:build unix

package fsm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm/fsmpb"
)

// BenchmarkScrub measures one Scrub of a state of SCRUB_MB (default 256)
// MiB of pending messages: wall time and the process's CPU time per GiB
// of state file. SCRUB_SHARE (the walk's CPU share, state.scrub_cpu_share)
// and SCRUB_BPS (the read's bytes per second, state.scrub_bytes_per_second)
// bound it as scadad does; unset, it is unbounded. SCRUB_PAYLOAD_KB sets
// the messages' size (default 16). Beside the scrub one apply after
// another runs; held-s is the longest of them (applies wait while bbolt's
// consistency check runs). Run:
// SCRUB_MB=1024 go test ./fsm -run '^$' -bench BenchmarkScrub -benchtime 1x
func BenchmarkScrub(b *testing.B) {
	mb := 256
	if v := os.Getenv("SCRUB_MB"); v != "" {
		fmt.Sscan(v, &mb)
	}
	var share float64
	var bps int64
	if v := os.Getenv("SCRUB_SHARE"); v != "" {
		fmt.Sscan(v, &share)
	}
	if v := os.Getenv("SCRUB_BPS"); v != "" {
		fmt.Sscan(v, &bps)
	}
	f, err := Open(filepath.Join(b.TempDir(), "state.db"), Options{Logger: zerolog.Nop(), NoSync: true, DigestCPUShare: share})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	payloadKB := 16
	if v := os.Getenv("SCRUB_PAYLOAD_KB"); v != "" {
		fmt.Sscan(v, &payloadKB)
	}
	payload := make([]byte, payloadKB<<10)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	var index uint64
	for written := 0; written < mb<<20; {
		msgs := make([]*fsmpb.Message, 32)
		for m := range msgs {
			msgs[m] = &fsmpb.Message{Id: fmt.Sprintf("m-%d-%d", index, m), Target: fmt.Sprintf("t-%d", m%4), Payload: payload}
			written += len(payload)
		}
		data, err := Encode(&fsmpb.Command{StampUnixNano: int64(index + 1), Actor: "bench", Body: &fsmpb.Command_SfEnqueue{SfEnqueue: &fsmpb.SFEnqueue{Messages: msgs}}})
		if err != nil {
			b.Fatal(err)
		}
		index++
		if r := f.ApplyBatch([]*raft.Log{{Index: index, Term: 1, Type: raft.LogCommand, Data: data}})[0].(*Result); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	if err := f.Commit(); err != nil {
		b.Fatal(err)
	}
	st, err := os.Stat(f.Path())
	if err != nil {
		b.Fatal(err)
	}
	gib := float64(st.Size()) / (1 << 30)
	b.ResetTimer()
	for range b.N {
		applying, held := make(chan struct{}), make(chan time.Duration)
		go func() {
			var longest time.Duration
			for ; ; time.Sleep(time.Millisecond) {
				select {
				case <-applying:
					held <- longest
					return
				default:
				}
				index++
				data, _ := Encode(&fsmpb.Command{StampUnixNano: int64(index), Actor: "bench", Body: &fsmpb.Command_SfEnqueue{SfEnqueue: &fsmpb.SFEnqueue{
					Messages: []*fsmpb.Message{{Id: fmt.Sprintf("beside-%d", index), Target: "t-0", Payload: payload[:256]}}}}})
				t0 := time.Now()
				if r := f.ApplyBatch([]*raft.Log{{Index: index, Term: 1, Type: raft.LogCommand, Data: data}})[0].(*Result); r.Err != nil {
					b.Error(r.Err)
				}
				longest = max(longest, time.Since(t0))
			}
		}()
		cpu0 := cpuTime()
		start := time.Now()
		_, _, err := f.Scrub(context.Background(), bps)
		close(applying)
		b.ReportMetric((<-held).Seconds(), "held-s")
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "wall-s")
		b.ReportMetric((cpuTime() - cpu0).Seconds(), "cpu-s")
		b.ReportMetric(time.Since(start).Seconds()/gib, "wall-s/GiB")
		b.ReportMetric((cpuTime()-cpu0).Seconds()/gib, "cpu-s/GiB")
	}
	b.ReportMetric(float64(st.Size())/(1<<20), "file-MiB")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
