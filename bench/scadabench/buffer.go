//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

type bufferResult struct {
	Messages     int     `json:"messages"`
	PayloadBytes int     `json:"payload_bytes"`
	FillSeconds  float64 `json:"fill_seconds"`
	RSSMiB       []int   `json:"rss_mib"`      // per node, after the fill
	RSSPeakMiB   []int   `json:"rss_peak_mib"` // per node, the largest 1 s sample during the fill
	// RSSPeakAnonMiB is, per node, the anonymous part of that sample.
	RSSPeakAnonMiB []int `json:"rss_peak_anon_mib"`
	RSSAnonMiB     []int `json:"rss_anon_mib"` // heap and stacks, without the mapped state file
	// RSSFileMiB is, per node, the resident pages of each mapped file
	// (by base name), from /proc/PID/smaps.
	RSSFileMiB      []map[string]int `json:"rss_file_mib"`
	RSSRestartMiB   []int            `json:"rss_after_restart_mib"` // per node, once the restarted cluster is Active
	FSMFileMiB      int              `json:"fsm_file_mib"`
	RestartToActive float64          `json:"restart_all_to_active_s"`
	PendingAfter    uint64           `json:"pending_after_restart"`
	CatchUpSeconds  float64          `json:"wiped_follower_catch_up_s"`
}

// bufferPhase fills the buffer with n pending messages (the sink refuses
// them), reads each node's memory, restarts every node and times until one
// is Active again, then wipes a follower and times its catch-up.
func (b *bench) bufferPhase(n, size int) (*bufferResult, error) {
	if err := b.sink.SetFailing(true); err != nil {
		return nil, err
	}
	lead, err := b.leader()
	if err != nil {
		return nil, err
	}
	conns := make([]*multi, 64)
	for i := range conns {
		if conns[i], err = b.clientFor([]*testcluster.Node{lead}); err != nil {
			return nil, err
		}
		defer conns[i].Close()
	}
	// Sample every node's RSS each second during the fill: the figure at
	// its end alone could miss a peak.
	peak := make([]int, len(b.c.Nodes))
	peakAnon := make([]int, len(b.c.Nodes))
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
			for i, nd := range b.c.Nodes {
				if rss, anon := nodeMemory(nd); rss > peak[i] {
					peak[i], peakAnon[i] = rss, anon
				}
			}
		}
	}()
	t0 := time.Now()
	w := runLoad(conns, len(conns), size, 0, n, seqIDs(fmt.Sprintf("buf%d", time.Now().UnixNano())), nil)
	close(stopSampling)
	<-sampled
	res := &bufferResult{Messages: w.Puts, PayloadBytes: size, FillSeconds: time.Since(t0).Seconds(), RSSPeakMiB: peak, RSSPeakAnonMiB: peakAnon}
	for _, nd := range b.c.Nodes {
		rss, anon := nodeMemory(nd)
		res.RSSMiB = append(res.RSSMiB, rss)
		res.RSSAnonMiB = append(res.RSSAnonMiB, anon)
		res.RSSFileMiB = append(res.RSSFileMiB, mappedFiles(nd))
	}
	if st, err := os.Stat(filepath.Join(lead.Dir, "data", "fsm.db")); err == nil {
		res.FSMFileMiB = int(st.Size() >> 20)
	}
	for _, nd := range b.c.Nodes {
		b.c.Stop(nd)
	}
	t1 := time.Now()
	if err := b.c.StartAll(); err != nil {
		return nil, err
	}
	if _, err := b.leader(); err != nil {
		return nil, err
	}
	res.RestartToActive = time.Since(t1).Seconds()
	for _, nd := range b.c.Nodes {
		rss, _ := nodeMemory(nd)
		res.RSSRestartMiB = append(res.RSSRestartMiB, rss)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if res.PendingAfter, err = b.pending(ctx); err != nil {
		return nil, err
	}
	// Wipe a follower (not the witness) and time until it has applied what
	// the leader has.
	lead, err = b.leader()
	if err != nil {
		return nil, err
	}
	var follower *testcluster.Node
	for _, nd := range b.c.Nodes {
		if nd != lead && !nd.Witness {
			follower = nd
		}
	}
	b.c.Kill(follower)
	if err := os.RemoveAll(filepath.Join(follower.Dir, "data")); err != nil {
		return nil, err
	}
	lc, err := b.client(lead)
	if err != nil {
		return nil, err
	}
	defer lc.Close()
	st, err := lc.api.Status(ctx, &controlpb.StatusRequest{})
	if err != nil {
		return nil, err
	}
	target := st.AppliedIndex
	t2 := time.Now()
	if err := b.c.Start(follower); err != nil {
		return nil, err
	}
	fc, err := b.client(follower)
	if err != nil {
		return nil, err
	}
	defer fc.Close()
	if err := testwait.Poll(ctx, func() bool {
		fs, err := fc.api.Status(ctx, &controlpb.StatusRequest{})
		return err == nil && fs.AppliedIndex >= target
	}); err != nil {
		return nil, fmt.Errorf("wiped follower did not catch up: %w", err)
	}
	res.CatchUpSeconds = time.Since(t2).Seconds()
	return res, nil
}

// nodeMemory reads VmRSS and RssAnon of the node's process, in MiB.
func nodeMemory(n *testcluster.Node) (rss, anon int) {
	pid := n.PID()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1, -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		var kb int
		if _, err := fmt.Sscanf(line, "VmRSS: %d kB", &kb); err == nil {
			rss = kb >> 10
		}
		if _, err := fmt.Sscanf(line, "RssAnon: %d kB", &kb); err == nil {
			anon = kb >> 10
		}
	}
	return rss, anon
}

// mappedFiles is the node's resident file pages by file, in MiB (files
// under 1 MiB left out).
func mappedFiles(n *testcluster.Node) map[string]int {
	out := map[string]int{}
	for name, kb := range n.ResidentFilesKB() {
		if kb >= 1024 {
			out[name] = kb >> 10
		}
	}
	return out
}
