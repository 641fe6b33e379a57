//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/internal/lockedbuf"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/opcua"
	"github.com/scadad/scadad/uasec"
)

type serviceLevelResult struct {
	RunsMs   []float64 `json:"runs_ms"`
	Failed   int       `json:"failed"`
	MinMs    float64   `json:"min_ms"`
	MedianMs float64   `json:"median_ms"`
	MaxMs    float64   `json:"max_ms"`
	// Field data: until the survivor serves a Good value of a gateway tag
	// with a source timestamp after the kill.
	DataRunsMs   []float64 `json:"data_runs_ms"`
	DataFailed   int       `json:"data_failed"`
	DataMinMs    float64   `json:"data_min_ms"`
	DataMedianMs float64   `json:"data_median_ms"`
	DataMaxMs    float64   `json:"data_max_ms"`
	// Gap: what a failover-following client (scadactl opcua watch)
	// reports between the last value notification from the killed
	// Active and the first from the survivor.
	GapRunsMs   []float64 `json:"gap_runs_ms"`
	GapFailed   int       `json:"gap_failed"`
	GapMinMs    float64   `json:"gap_min_ms"`
	GapMedianMs float64   `json:"gap_median_ms"`
	GapMaxMs    float64   `json:"gap_max_ms"`
}

// serviceLevelPhase: K times, wait for a healthy cluster whose Active
// advertises 250 and serves live field data, SIGKILL it, and time until a
// client reads 250 from the survivor (a fresh connect-and-read every
// -probe-interval), and until it reads a Good value of a gateway tag
// (changing every 100 ms in the simulator) stamped after the kill.
func (b *bench) serviceLevelPhase() (*serviceLevelResult, error) {
	res := &serviceLevelResult{RunsMs: []float64{}, DataRunsMs: []float64{}}
	opts := uasec.ClientOptions{Timeout: b.o.probeTimeout}
	sim, err := testcluster.StartSim(b.c.Bin, b.c.Dir, "-change", "100ms")
	if err != nil {
		return res, err
	}
	defer sim.Close()
	site := testcluster.SiteConfigGateway("bench", sim.Addr, map[string]string{"bench": b.sink.URL}, 0)
	file := filepath.Join(b.c.Dir, "site-gateway.yaml")
	if err := os.WriteFile(file, site, 0o644); err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	_, errs, code, err := b.c.Ctl(ctx, nil, "deploy", "push", file)
	cancel()
	if err != nil || code != 0 {
		return res, fmt.Errorf("deploy a site config with a gateway: exit %d: %s %v", code, errs, err)
	}
	for run := 1; run <= b.o.failovers; run++ {
		lead, err := b.leader()
		if err != nil {
			return res, err
		}
		var survivor *testcluster.Node
		for _, n := range b.c.Nodes {
			if n != lead && !n.Witness {
				survivor = n
			}
		}
		// Healthy means the Active advertises 250 and the Standby 240.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = testwait.Poll(ctx, func() bool {
			a, errA := opcua.ReadServiceLevel(ctx, lead.OPCUA, opts)
			s, errS := opcua.ReadServiceLevel(ctx, survivor.OPCUA, opts)
			return errA == nil && errS == nil && a == 250 && s == 240
		})
		cancel()
		if err != nil {
			return res, fmt.Errorf("the pair never reached 250/240 before the kill")
		}
		ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
		err = testwait.Poll(ctx, func() bool { return freshGoodValue(ctx, lead.OPCUA, opts, time.Now().Add(-time.Second)) })
		cancel()
		if err != nil {
			return res, fmt.Errorf("the Active %s never served live field data before the kill", lead.ID)
		}
		gap, stopWatch, err := watchGap(lead.OPCUA, survivor.OPCUA, opts)
		if err != nil {
			return res, err
		}
		time.Sleep(b.o.settle)
		t0 := time.Now()
		b.c.Kill(lead)
		ctx, cancel = context.WithTimeout(context.Background(), b.o.foMax)
		var took time.Duration
		for ctx.Err() == nil {
			if lvl, err := opcua.ReadServiceLevel(ctx, survivor.OPCUA, opts); err == nil && lvl == 250 {
				took = time.Since(t0)
				break
			}
			time.Sleep(b.o.probeEvery)
		}
		var data time.Duration
		for ctx.Err() == nil {
			if freshGoodValue(ctx, survivor.OPCUA, opts, t0) {
				data = time.Since(t0)
				break
			}
			time.Sleep(b.o.probeEvery)
		}
		g, gapOK := gap(ctx)
		stopWatch()
		cancel()
		if gapOK {
			res.GapRunsMs = append(res.GapRunsMs, float64(g.Microseconds())/1000)
			fmt.Printf("notification gap %d/%d: %v\n", run, b.o.failovers, g)
		} else {
			res.GapFailed++
		}
		if took > 0 {
			res.RunsMs = append(res.RunsMs, float64(took.Microseconds())/1000)
			fmt.Printf("servicelevel %d/%d: killed %s, %s advertised 250 after %.0fms\n", run, b.o.failovers, lead.ID, survivor.ID, float64(took.Microseconds())/1000)
		} else {
			res.Failed++
		}
		if data > 0 {
			res.DataRunsMs = append(res.DataRunsMs, float64(data.Microseconds())/1000)
			fmt.Printf("field data %d/%d: %s served a Good value stamped after the kill %.0fms after it\n", run, b.o.failovers, survivor.ID, float64(data.Microseconds())/1000)
		} else {
			res.DataFailed++
		}
		if err := b.c.Start(lead); err != nil {
			return res, err
		}
	}
	if r := slices.Sorted(slices.Values(res.RunsMs)); len(r) > 0 {
		res.MinMs, res.MaxMs = r[0], r[len(r)-1]
		res.MedianMs = (r[(len(r)-1)/2] + r[len(r)/2]) / 2
	}
	if r := slices.Sorted(slices.Values(res.DataRunsMs)); len(r) > 0 {
		res.DataMinMs, res.DataMaxMs = r[0], r[len(r)-1]
		res.DataMedianMs = (r[(len(r)-1)/2] + r[len(r)/2]) / 2
	}
	if r := slices.Sorted(slices.Values(res.GapRunsMs)); len(r) > 0 {
		res.GapMinMs, res.GapMaxMs = r[0], r[len(r)-1]
		res.GapMedianMs = (r[(len(r)-1)/2] + r[len(r)/2]) / 2
	}
	return res, nil
}

var gapLine = regexp.MustCompile(`notification gap (\S+)`)

// watchGap starts the failover-following client `scadactl opcua watch`
// runs (opcua.WatchWith) on Pump1.Speed of both voters and waits until it
// receives values from lead. gap then waits (within ctx) for the gap the
// client reports after a failover; stop ends the client.
func watchGap(lead, survivor string, opts uasec.ClientOptions) (gap func(context.Context) (time.Duration, bool), stop func(), err error) {
	out := &lockedbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = opcua.WatchWith(ctx, []string{lead, survivor}, "ns=2;s=Pump1.Speed", out, opts)
	}()
	stop = func() { cancel(); <-done }
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if err := testwait.Poll(wctx, func() bool { return strings.Count(out.String(), lead+" ns=2;s=Pump1.Speed = ") >= 3 }); err != nil {
		stop()
		return nil, nil, fmt.Errorf("the watching client got no values from the Active %s:\n%s", lead, out.String())
	}
	gap = func(ctx context.Context) (time.Duration, bool) {
		var d time.Duration
		err := testwait.Poll(ctx, func() bool {
			m := gapLine.FindStringSubmatch(out.String())
			if m == nil {
				return false
			}
			var perr error
			d, perr = time.ParseDuration(m[1])
			return perr == nil
		})
		return d, err == nil
	}
	return gap, stop, nil
}

// freshGoodValue reports whether the OPC UA server at url serves the
// site's Pump1.Speed with Good quality and a source timestamp after since.
func freshGoodValue(ctx context.Context, url string, opts uasec.ClientOptions, since time.Time) bool {
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	c, err := uasec.Dial(ctx, url, opts)
	if err != nil {
		return false
	}
	defer opts.Close(c)
	ns, err := c.FindNamespace(ctx, "urn:test:scadad")
	if err != nil {
		return false
	}
	resp, err := c.Read(ctx, &ua.ReadRequest{NodesToRead: []*ua.ReadValueID{{NodeID: ua.NewStringNodeID(ns, "Pump1.Speed"), AttributeID: ua.AttributeIDValue}}, TimestampsToReturn: ua.TimestampsToReturnBoth})
	if err != nil || len(resp.Results) != 1 {
		return false
	}
	dv := resp.Results[0]
	return dv.Status == ua.StatusOK && dv.Value != nil && dv.SourceTimestamp.After(since)
}
