//go:build unix

package main

import (
	"fmt"
	"time"
)

// stallResult: how many SIGSTOPs of the Active for -stall the cluster rode
// out (the same node Active afterwards, in the same term).
type stallResult struct {
	StallMs    float64  `json:"stall_ms"`
	Runs       int      `json:"runs"`
	RodeOut    int      `json:"rode_out"`
	FailedOver []string `json:"failed_over,omitempty"`
}

// stallPhase stops the Active with SIGSTOP for -stall, resumes it, and
// checks that no failover followed: once the cluster is settled again the
// same node is Active with the same epoch (an election, even one the old
// leader won back, raises the term).
func (b *bench) stallPhase() (*stallResult, error) {
	res := &stallResult{StallMs: float64(b.o.stall.Microseconds()) / 1000}
	for run := 1; run <= b.o.failovers; run++ {
		lead, err := b.settledLeader()
		if err != nil {
			return res, err
		}
		before, ok := lead.Health()
		if !ok {
			return res, fmt.Errorf("%s does not answer /health/active", lead.ID)
		}
		b.c.Pause(lead)
		time.Sleep(b.o.stall)
		b.c.Resume(lead)
		// Long enough for any election the stall started to finish.
		time.Sleep(b.o.settle)
		after, err := b.leader()
		if err != nil {
			return res, err
		}
		h, _ := after.Health()
		res.Runs++
		if after == lead && h.Epoch == before.Epoch {
			res.RodeOut++
			fmt.Printf("stall %d/%d: %s stopped for %s, still Active at epoch %s\n", run, b.o.failovers, lead.ID, b.o.stall, h.Epoch)
		} else {
			res.FailedOver = append(res.FailedOver, fmt.Sprintf("%s@%s->%s@%s", lead.ID, before.Epoch, after.ID, h.Epoch))
			fmt.Printf("stall %d/%d: %s stopped for %s: failed over, %s Active at epoch %s (was %s)\n", run, b.o.failovers, lead.ID, b.o.stall, after.ID, h.Epoch, before.Epoch)
		}
	}
	return res, nil
}
