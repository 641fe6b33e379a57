package raftnode

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/rs/zerolog"
)

// BenchmarkApplyStages traces one committed apply at a time (a lone
// producer) through a 3-node witness cluster over mutual TLS with real log
// files, per log store: the round trip the caller sees, and where it went
// by hashicorp/raft's own timers (ms, median and 90th percentile per entry or RPC), collected by
// a sink installed for the run:
//
//	dispatchLog          the leader stores the entry in its log (fsync)
//	appendEntries.rpc    leader → follower AppendEntries and its answer,
//	                     which includes the follower's own log write
//	storeLogs            a follower stores the entries (fsync; both followers)
//	commitTime           the leader's dispatch → the entry is committed
//	fsm.apply            an FSM applies it (all three nodes: one process)
//
// Run: go test ./raftnode -run '^$' -bench ApplyStages -benchtime 2000x
func BenchmarkApplyStages(b *testing.B) {
	for _, store := range []LogStore{LogStoreWAL, LogStoreBoltDB} {
		b.Run("store="+string(store), func(b *testing.B) {
			h := newHarness(b, ModeWitness, []string{"a", "b", "w"}, "w")
			h.tweak = func(c *Config) { c.Logger = zerolog.Nop(); c.LogStore = store }
			for _, id := range []string{"a", "b", "w"} {
				h.start(id)
			}
			leader := h.node(h.waitOneActive(15 * time.Second))
			payload := make([]byte, 256)
			for range 50 { // warm the connections
				if _, err := leader.Apply(context.Background(), payload); err != nil {
					// An election on a loaded machine: find the new leader.
					leader = h.node(h.waitOneActive(15 * time.Second))
				}
			}
			sink := &stageSink{sums: map[string][]float64{}}
			cfg := metrics.DefaultConfig("")
			cfg.EnableHostname, cfg.EnableRuntimeMetrics = false, false
			if _, err := metrics.NewGlobal(cfg, sink); err != nil {
				b.Fatal(err)
			}
			defer func() { _, _ = metrics.NewGlobal(cfg, &metrics.BlackholeSink{}) }()
			rtt := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := leader.Apply(ctx, payload)
				cancel()
				if err != nil {
					b.Fatalf("apply %d (the timers need one leader throughout): %v", len(rtt), err)
				}
				rtt = append(rtt, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(rtt)
			b.ReportMetric(float64(rtt[len(rtt)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(rtt[len(rtt)*9/10].Microseconds())/1000, "p90-ms")
			if b.N >= 100 { // the final run, not the calibration
				fmt.Printf("%s, %d applies, leader %s:\n", b.Name(), b.N, leader.cfg.NodeID)
				for _, line := range sink.report() {
					fmt.Println("  " + line)
				}
			}
		})
	}
}

// stageSink keeps raft's timing samples by name (a peer label kept).
type stageSink struct {
	mu   sync.Mutex
	sums map[string][]float64
}

func (s *stageSink) add(key []string, val float32, labels []metrics.Label) {
	name := strings.Join(key, ".")
	for _, l := range labels {
		name += "{" + l.Name + "=" + l.Value + "}"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sums[name] = append(s.sums[name], float64(val))
}

func (s *stageSink) report() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for name, v := range s.sums {
		if strings.Contains(name, "applyBatchNum") || strings.HasSuffix(name, ".a") || strings.HasSuffix(name, ".b") || strings.HasSuffix(name, ".w") {
			continue // a count, or the unlabelled copy of a labelled timer
		}
		for _, want := range []string{"dispatchLog", "appendEntries.rpc", "storeLogs", "commitTime", "fsm.apply"} {
			if strings.Contains(name, want) {
				slices.Sort(v)
				out = append(out, fmt.Sprintf("%-50s n=%5d p50=%.3f p90=%.3f ms", name, len(v), v[len(v)/2], v[len(v)*9/10]))
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

func (s *stageSink) SetGauge([]string, float32)                               {}
func (s *stageSink) SetGaugeWithLabels([]string, float32, []metrics.Label)    {}
func (s *stageSink) EmitKey([]string, float32)                                {}
func (s *stageSink) IncrCounter([]string, float32)                            {}
func (s *stageSink) IncrCounterWithLabels([]string, float32, []metrics.Label) {}
func (s *stageSink) AddSample(key []string, val float32)                      { s.add(key, val, nil) }
func (s *stageSink) AddSampleWithLabels(key []string, val float32, l []metrics.Label) {
	s.add(key, val, l)
}
