//go:build unix

package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/scadad/scadad/internal/testcluster"
)

type failoverResult struct {
	RunsMs   []float64 `json:"runs_ms"`
	Failed   int       `json:"failed"`
	MinMs    float64   `json:"min_ms"`
	MedianMs float64   `json:"median_ms"`
	MaxMs    float64   `json:"max_ms"`
}

// failoverPhase: K times, wait for a healthy cluster, SIGKILL the Active,
// and measure until the first probe enqueue through the survivors is
// acknowledged.
func (b *bench) failoverPhase() (*failoverResult, error) {
	res := &failoverResult{RunsMs: []float64{}}
	for run := 1; run <= b.o.failovers; run++ {
		lead, err := b.settledLeader()
		if err != nil {
			return res, err
		}
		var survivors []*testcluster.Node
		for _, n := range b.c.Nodes {
			if n != lead && !n.Witness {
				survivors = append(survivors, n)
			}
		}
		cli, err := b.clientFor(survivors)
		if err != nil {
			return res, err
		}
		for i := range 2 * len(survivors) { // connect to every survivor before the kill
			wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = cli.enqueue(wctx, fmt.Sprintf("fo%d-%d/warm/%d", run, time.Now().UnixNano(), i), []byte("x"))
			wcancel()
			if err != nil {
				return res, fmt.Errorf("warm-up enqueue: %v", err)
			}
		}
		t0 := time.Now()
		b.c.Kill(lead)
		first := make(chan time.Time, 1)
		ctx, cancel := context.WithTimeout(context.Background(), b.o.foMax)
		tick := time.NewTicker(b.o.probeEvery)
		var took time.Duration
	probe:
		for n := 0; ; n++ {
			go func() {
				pctx, pcancel := context.WithTimeout(ctx, b.o.probeTimeout)
				defer pcancel()
				if cli.enqueue(pctx, fmt.Sprintf("fo%d-%d/probe/%d", run, t0.UnixNano(), n), []byte("x")) == nil {
					select {
					case first <- time.Now():
					default:
					}
				}
			}()
			select {
			case t := <-first:
				took = t.Sub(t0)
				break probe
			case <-ctx.Done():
				break probe
			case <-tick.C:
			}
		}
		tick.Stop()
		cancel()
		cli.Close()
		if took > 0 {
			res.RunsMs = append(res.RunsMs, float64(took.Microseconds())/1000)
			fmt.Printf("failover %d/%d: killed %s (Active), first acknowledged enqueue after %.0fms\n", run, b.o.failovers, lead.ID, float64(took.Microseconds())/1000)
		} else {
			res.Failed++
			fmt.Printf("failover %d/%d: killed %s (Active), no enqueue succeeded within %v\n", run, b.o.failovers, lead.ID, b.o.foMax)
		}
		if err := b.c.Start(lead); err != nil {
			return res, fmt.Errorf("restart %s: %v", lead.ID, err)
		}
	}
	if r := slices.Sorted(slices.Values(res.RunsMs)); len(r) > 0 {
		res.MinMs, res.MaxMs = r[0], r[len(r)-1]
		res.MedianMs = (r[(len(r)-1)/2] + r[len(r)/2]) / 2
	}
	return res, nil
}
