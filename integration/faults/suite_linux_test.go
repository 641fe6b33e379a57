//go:build linux

package faults

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
)

var (
	flagSeed      = flag.Uint64("seed", 0, "nemesis schedule seed (0: derive one from the clock and print it)")
	flagRounds    = flag.Int("rounds", 0, "rounds per mode (0: the short CI profile)")
	flagModes     = flag.String("modes", "witness,pair", "comma-separated cluster modes to run: witness, pair, strict")
	flagOut       = flag.String("out", "", "folder for report.json, summary.txt and timeline.svg per mode (default: a temporary folder, kept and printed)")
	flagPairSplit = flag.Bool("pair-split", true, "short profile: also run the pair partition longer than override_after (both sides go Active, then heal)")
	flagLoopbck   = flag.Bool("loopback", false, "force the degraded loopback mode even when namespaces are available")
	flagNodeYAML  = flag.String("node-yaml", "", "YAML merged over every node's config, e.g. $'raft:\\n  log_store: boltdb\\n'")
	flagKinds     = flag.String("kinds", "", "comma-separated fault kinds to draw from alone, one per round (default: the mode's whole mix), e.g. isolate-active,kill-active to compare failovers")
)

// shortRounds is the CI profile: a few minutes for all modes together.
var shortRounds = map[string]int{"witness": 14, "pair": 5, "strict": 6}

var bin *testcluster.Binaries

// cleanups run on exit and on SIGINT/SIGTERM, so an interrupted run leaves
// no namespace or process behind (a run killed with SIGKILL is cleaned by
// the next run's start).
type cleanupList struct {
	mu  sync.Mutex
	fns []func()
}

func (c *cleanupList) add(f func()) {
	c.mu.Lock()
	c.fns = append(c.fns, f)
	c.mu.Unlock()
}

func (c *cleanupList) run() {
	c.mu.Lock()
	fns := c.fns
	c.fns = nil
	c.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

var onExit cleanupList

func TestMain(m *testing.M) {
	flag.Parse()
	if ok, _ := netnsAvailable(); ok {
		if removed, err := cleanStaleNamespaces(); err != nil {
			fmt.Fprintln(os.Stderr, "faults: removing stale namespaces:", err)
		} else if len(removed) > 0 {
			fmt.Fprintln(os.Stderr, "faults: removed stale namespaces of dead runs:", removed)
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "faults: %v: cleaning up\n", s)
		onExit.run()
		os.Exit(2)
	}()
	var err error
	bin, err = testcluster.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	onExit.run()
	bin.Remove()
	os.Exit(code)
}

func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault suite runs real clusters for minutes")
	}
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with: go test ./integration/faults/ -run TestFaults -seed %d)", seed, seed)
	out := *flagOut
	if out == "" {
		var err error
		if out, err = os.MkdirTemp("", "scadad-faults-report-"); err != nil {
			t.Fatal(err)
		}
	}
	for _, mode := range strings.Split(*flagModes, ",") {
		mode = strings.TrimSpace(mode)
		rounds := *flagRounds
		if rounds == 0 {
			rounds = shortRounds[mode]
		}
		t.Run(mode, func(t *testing.T) {
			runMode(t, mode, rounds, seed, filepath.Join(out, mode))
		})
	}
}

func runMode(t *testing.T, mode string, rounds int, seed uint64, outDir string) {
	cfg := suiteConfig{
		Mode: mode, Voters: 2, Witness: mode == "witness", OverrideAfter: 3 * time.Second,
		Rounds: rounds, Seed: seed, Dir: t.TempDir(), ClientsPerNode: 2, CASClients: 2, Extra: *flagNodeYAML,
	}
	var nw network
	ok, why := netnsAvailable()
	if *flagLoopbck {
		ok, why = false, "-loopback given"
	}
	ids := []string{"node-a", "node-b"}
	if cfg.Witness {
		ids = append(ids, "witness")
	}
	if ok {
		nn, err := newNetns(ids)
		if err != nil {
			t.Fatalf("make namespaces: %v", err)
		}
		nw = nn
		onExit.add(func() { nn.Close() })
		t.Cleanup(func() {
			if err := nn.Close(); err != nil {
				t.Errorf("remove namespaces: %v", err)
			}
		})
	} else {
		nw = loopbackNet{why: why}
		t.Logf("!!! DEGRADED MODE: %s", nw.Kind())
	}
	t.Logf("network: %s", nw.Kind())

	r := newRunner(cfg, bin, nw, t.Logf)
	onExit.add(r.close)
	t.Cleanup(func() {
		r.close()
		if t.Failed() && r.c != nil {
			for _, n := range r.c.Nodes {
				t.Logf("---- last log lines of %s ----\n%s", n.ID, n.LogStory(30))
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := r.start(ctx); err != nil {
		t.Fatal(err)
	}
	h := &history{Seed: seed, Mode: mode, Network: nw.Kind(), OverrideAfter: cfg.OverrideAfter, Start: time.Now()}
	for _, n := range r.c.Nodes {
		h.Nodes = append(h.Nodes, n.ID)
	}
	var err error
	if h.InitialPtr, _, err = r.pointer(ctx); err != nil {
		t.Fatal(err)
	}

	work, stopWork := context.WithCancel(ctx)
	enq := r.runEnqueuers(work, fmt.Sprintf("s%d-%s", seed%100000, mode))
	cas := r.runCAS(work, seed)
	sleepCtx(ctx, 2*time.Second)

	h.Schedule = newSchedule(seed, rounds, mode, cfg.Witness, cfg.OverrideAfter)
	if *flagKinds != "" {
		kinds := strings.Split(*flagKinds, ",")
		for _, k := range kinds {
			if !slices.Contains(kindsFor(mode, cfg.Witness), k) {
				t.Fatalf("-kinds: %q is not a fault of %s mode (%s)", k, mode, strings.Join(kindsFor(mode, cfg.Witness), ", "))
			}
		}
		h.Schedule = newScheduleOf(seed, rounds, kinds, cfg.OverrideAfter)
	}
	if mode == "pair" && *flagRounds == 0 && !*flagPairSplit {
		// -pair-split=false leaves out the partition longer than
		// override_after (the split and its heal) for a quicker run.
		h.Schedule = h.Schedule[:len(h.Schedule)-1]
		t.Log("partition-over-override round left out (-pair-split=false)")
	}
	for _, rd := range h.Schedule {
		var kinds []string
		for _, f := range rd.Faults {
			kinds = append(kinds, f.Kind)
		}
		t.Logf("round %d/%d: %s for %s", rd.Index, len(h.Schedule), strings.Join(kinds, "+"), rd.Faults[0].Hold.Round(time.Millisecond))
		r.runRound(ctx, rd)
		sleepCtx(ctx, time.Second) // some fault-free traffic between rounds
	}

	// Heal everything, bring every node back, let the workload run on a
	// healthy cluster a little, then stop it and drain.
	if err := r.healNetwork(); err != nil {
		t.Errorf("heal network: %v", err)
	}
	for _, n := range r.c.Nodes {
		r.c.Resume(n)
		if !n.Running() {
			if err := r.c.Start(n); err != nil {
				t.Errorf("restart %s: %v", n.ID, err)
			}
		}
	}
	split := false
	r.mu.Lock()
	h.SplitAt = r.splitAt
	split = !r.splitAt.IsZero()
	r.mu.Unlock()
	if !split {
		if _, err := r.waitOneActive(ctx, 60*time.Second); err != nil {
			t.Errorf("after the last round: %v", err)
		}
	}
	sleepCtx(ctx, 2*time.Second)
	stopWork()
	enq.Wait()
	cas.Wait()

	h.Enqueues, h.CAS, _, h.Events = r.snapshot()
	acked := map[string]bool{}
	for _, op := range h.Enqueues {
		if op.Acked {
			acked[op.ID] = true
		}
	}
	// Wait for the buffer to drain: every acknowledged id at the sink.
	deadline := time.Now().Add(90 * time.Second)
	for {
		ds, err := deliveries(r.sink)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, d := range ds {
			if d.Status/100 == 2 {
				got[d.ID] = true
			}
		}
		missing := 0
		for id := range acked {
			if !got[id] {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			if missing > 0 {
				t.Logf("%d acknowledged ids not delivered after the drain deadline; asking the buffers", missing)
			}
			break
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	if h.Pending, h.Parked, err = r.buffered(ctx); err != nil {
		t.Errorf("list buffered messages: %v", err)
	}
	if h.FinalPtr, h.PtrHistory, err = r.pointer(ctx); err != nil {
		t.Errorf("final pointer: %v", err)
	}
	if mode == "pair" {
		if h.Superseded, err = r.supersededDeploys(ctx); err != nil {
			t.Errorf("read superseded deploys from the audit: %v", err)
		}
	}
	sleepCtx(ctx, 300*time.Millisecond) // a last role sample after the drain
	h.End = time.Now()
	_, _, h.Samples, _ = r.snapshot()
	if h.Deliveries, err = deliveries(r.sink); err != nil {
		t.Fatal(err)
	}
	cancel()

	rep := analyze(h, time.Minute)
	if err := rep.write(outDir); err != nil {
		t.Errorf("write report: %v", err)
	}
	if err := writeEvidence(outDir, r, h); err != nil {
		t.Errorf("write evidence: %v", err)
	}
	t.Logf("report in %s\n%s", outDir, rep.summary())
	if rep.Delivery.Acked < 50 {
		t.Errorf("only %d messages acknowledged: the workload did not run", rep.Delivery.Acked)
	}
	if rep.CAS.OK < 3 {
		t.Errorf("only %d compare-and-set pushes succeeded: the CAS workload did not run", rep.CAS.OK)
	}
	for _, p := range rep.Problems {
		t.Errorf("seed %d: %s", seed, p)
	}
}

// writeEvidence keeps what a failure needs to be diagnosed: every node's
// log, the role samples and the CAS operations.
func writeEvidence(dir string, r *runner, h *history) error {
	for _, n := range r.c.Nodes {
		data, err := os.ReadFile(n.LogPath())
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, n.ID+".log"), data, 0o644); err != nil {
			return err
		}
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	for _, s := range h.Samples {
		enc.Encode(s)
	}
	if err := os.WriteFile(filepath.Join(dir, "samples.jsonl"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	b.Reset()
	for _, op := range h.CAS {
		enc.Encode(op)
	}
	return os.WriteFile(filepath.Join(dir, "cas.jsonl"), []byte(b.String()), 0o644)
}

// pointer reads the deploy pointer and its history from the Active node
// (or, after a pair split, from any node).
func (r *runner) pointer(ctx context.Context) (pointer, map[uint64]string, error) {
	var hist controlpb.DeployHistoryResponse
	nodes := []*testcluster.Node(nil)
	if a, _, _, _ := r.current(); a != nil {
		nodes = []*testcluster.Node{a}
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := r.ctlJSON(ctx, nodes, &hist, "deploy", "history"); err != nil {
		return pointer{}, nil, err
	}
	revs := map[uint64]string{}
	for _, rv := range hist.Revisions {
		revs[rv.Revision] = rv.Sha256
	}
	return pointer{Rev: hist.Current, SHA: revs[hist.Current]}, revs, nil
}
