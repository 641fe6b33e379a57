package raftnode

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// BenchmarkApply measures committed applies through a 3-node witness
// cluster over mutual TLS on loopback, with real bolt files: 256-byte
// commands, one at a time and from 64 concurrent callers (raft batches
// those into shared log writes).
func BenchmarkApply(b *testing.B) {
	for _, callers := range []int{1, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			h := newHarness(b, ModeWitness, []string{"a", "b", "w"}, "w")
			h.tweak = func(c *Config) { c.Logger = zerolog.Nop() }
			for _, id := range []string{"a", "b", "w"} {
				h.start(id)
			}
			leader := h.node(h.waitOneActive(15 * time.Second))
			payload := make([]byte, 256)
			var next atomic.Int64
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			start := time.Now()
			errs := make(chan error, callers)
			for c := 0; c < callers; c++ {
				go func() {
					for next.Add(1) <= int64(b.N) {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						_, err := leader.Apply(ctx, payload)
						cancel()
						if err != nil {
							errs <- err
							return
						}
					}
					errs <- nil
				}()
			}
			for c := 0; c < callers; c++ {
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "applies/s")
		})
	}
}
