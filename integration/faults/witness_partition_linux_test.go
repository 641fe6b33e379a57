//go:build linux

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPartitionFailoverWhenTheWitnessHoldsTheLongerLog partitions the
// Active (packets dropped, no RST) at a moment when its last entries
// reached the witness but not the Standby: the Standby cannot win an
// election (the witness refuses its pre-vote: its own log is longer), so
// the witness must stand and hand over. Before the fix it stood only when
// its own election timer fired (3 x election_timeout), so the failover
// took at least that long; the witness now stands as soon as it refuses
// such a pre-vote. Raft takes no election timeout below the lease, so the
// witness stands one to two of its leases after the refusal; with the
// lease at half the witness's heartbeat timeout that still cost 0.25–0.5 of
// the voters' heartbeat timeout over a SIGKILL's failover; the witness's
// lease is now a fifth of it, and the failover must come within the
// Standby's detection (its heartbeat timeout and one dead-leader check)
// plus two such leases and a margin for the hand-off.
//
// The timeouts are four times the defaults so the order of events does
// not depend on how fast tc filters go in on a loaded machine: the
// Standby's silence starts at the first cut, the witness's at the second,
// and the witness (half the heartbeat timeout) must time out first.
func TestPartitionFailoverWhenTheWitnessHoldsTheLongerLog(t *testing.T) {
	if testing.Short() {
		t.Skip("real clusters in network namespaces")
	}
	ok, why := netnsAvailable()
	if !ok {
		t.Skip("network namespaces unavailable: " + why)
	}
	const heartbeat, election = 2 * time.Second, 2 * time.Second
	witnessElection := 3 * election   // raftnode's WitnessElectionTimeout default
	witnessLease := heartbeat / 2 / 5 // raftnode: a fifth of the witness's heartbeat timeout (half the voters')
	nn, err := newNetns([]string{"node-a", "node-b", "witness"})
	if err != nil {
		t.Fatalf("make namespaces: %v", err)
	}
	onExit.add(func() { nn.Close() })
	t.Cleanup(func() {
		if err := nn.Close(); err != nil {
			t.Errorf("remove namespaces: %v", err)
		}
	})
	cfg := suiteConfig{
		Mode: "witness", Voters: 2, Witness: true, OverrideAfter: 10 * time.Second, Dir: t.TempDir(),
		Extra: fmt.Sprintf("cluster:\n  heartbeat_timeout: %s\n  election_timeout: %s\n  leader_lease_timeout: 1s\n", heartbeat, election),
	}
	r := newRunner(cfg, bin, nn, t.Logf)
	onExit.add(r.close)
	t.Cleanup(func() {
		r.close()
		if t.Failed() && r.c != nil {
			for _, n := range r.c.Nodes {
				t.Logf("---- last log lines of %s ----\n%s", n.ID, n.LogStory(40))
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := r.start(ctx); err != nil {
		t.Fatal(err)
	}
	// settle waits for a steady cluster, which every trial starts from:
	// one Active, and every node's last word from it not older than a
	// heartbeat (raft's own timers re-armed on it). heal lifts the
	// partition first.
	settle := func() {
		t.Helper()
		if _, err := r.waitOneActive(ctx, 60*time.Second); err != nil {
			t.Fatal(err)
		}
		sleepCtx(ctx, heartbeat)
	}
	heal := func() {
		t.Helper()
		if err := nn.Apply(nil, 0); err != nil {
			t.Fatalf("heal: %v", err)
		}
		settle()
	}
	settle()
	const trials = 3
	var gaps []time.Duration
	repeats := 0
	for trial := 1; trial <= trials; trial++ {
		active, err := r.waitOneActive(ctx, 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, epochBefore, standbys, witness := r.current()
		standby := standbys[0]
		cuts := map[string]int{}

		// The Active's packets to the Standby vanish: what it commits now
		// reaches the witness alone, and the Standby's log falls behind.
		firstCut := time.Now()
		if err := addCuts(nn, cuts, link{active.ID, standby.ID}); err != nil {
			t.Fatal(err)
		}
		id := "longer-log-" + strconv.Itoa(trial) + "-" + strconv.Itoa(repeats)
		if !r.enqueue(ctx, active, id) {
			t.Fatalf("trial %d: enqueue %s on the Active %s was not acknowledged", trial, id, active.ID)
		}
		// The rest of the partition: the Active hears nobody and nobody hears it.
		start := time.Now()
		if err := addCuts(nn, cuts, link{active.ID, witness.ID}, link{witness.ID, active.ID}, link{standby.ID, active.ID}); err != nil {
			t.Fatal(err)
		}
		// The trial is about a Standby that times out after the partition
		// is whole: one already standing (the enqueue or tc slow on a
		// loaded machine, past its heartbeat timeout) may win with the
		// witness's vote before its log fell behind, and tells nothing.
		setup := time.Since(firstCut)
		early := ""
		if setup > heartbeat/2 {
			early = fmt.Sprintf("the partition took %s to put in place, over half the Standby's heartbeat timeout (%s)", setup.Round(time.Millisecond), heartbeat)
		} else if s := r.health(ctx, standby); s.Role == "active" && s.Epoch != epochBefore {
			early = fmt.Sprintf("%s was Active before the partition was whole (%s to put in place)", standby.ID, setup.Round(time.Millisecond))
		}
		if early != "" {
			if repeats++; repeats > 2 {
				t.Fatalf("trial %d: %s, %d times", trial, early, repeats)
			}
			t.Logf("trial %d: %s: trial repeated", trial, early)
			heal()
			trial--
			continue
		}
		var failover time.Duration
		for {
			s := r.health(ctx, standby)
			if s.OK && s.Role == "active" && s.Epoch != epochBefore {
				failover = time.Since(start)
				break
			}
			if time.Since(start) > 3*witnessElection {
				t.Fatalf("trial %d: %s not Active %s after the partition of %s (last answer %+v)", trial, standby.ID, 3*witnessElection, active.ID, s)
			}
			sleepCtx(ctx, 20*time.Millisecond)
		}
		t.Logf("trial %d: partition of %s at %s; %s Active after %s (witness election timeout %s)",
			trial, active.ID, start.Format("15:04:05.000"), standby.ID, failover.Round(time.Millisecond), witnessElection)
		if failover >= witnessElection {
			t.Errorf("trial %d: failover took %s, at least the witness's election timeout (%s): the witness waited for its own timer instead of standing when it refused the Standby's pre-vote",
				trial, failover.Round(time.Millisecond), witnessElection)
		}
		// From the witness's refusal to its election: one to two of its
		// leases (raft's lowest election timeout, randomised up to twice
		// that) and the election's round trips.
		if stood, won, ok := standToWin(witness.LogTail(400)); !ok {
			t.Errorf("trial %d: the witness's log has no refused pre-vote followed by an election it won", trial)
		} else {
			gaps = append(gaps, won.Sub(stood))
			t.Logf("trial %d: the witness won %s after refusing the Standby's pre-vote", trial, won.Sub(stood))
		}
		// The next trial starts from a steady cluster, the old Active back
		// as a Standby.
		heal()
		// The message acknowledged before the partition is on the new Active.
		pending, _, err := r.buffered(ctx)
		if err != nil {
			t.Fatalf("trial %d: buffered: %v", trial, err)
		}
		delivered, err := deliveries(r.sink)
		if err != nil {
			t.Fatal(err)
		}
		found := pending[id]
		for _, d := range delivered {
			found = found || d.ID == id
		}
		if !found {
			t.Errorf("trial %d: acknowledged message %s is neither buffered nor delivered", trial, id)
		}
	}
	// The median against two leases and 100 ms: a loaded machine may
	// stretch one trial's round trips; before the witness's lease was cut
	// to a fifth of its heartbeat timeout no trial could come under it
	// (the lowest election timeout was then itself 2.5 of these leases).
	if len(gaps) == trials {
		slices.Sort(gaps)
		if median := gaps[trials/2]; median > 2*witnessLease+100*time.Millisecond {
			t.Errorf("the witness won its election a median %s after refusing the Standby's pre-vote (%v), over two of its leases (%s) and 100ms",
				median, gaps, 2*witnessLease)
		}
	}
}

// addCuts drops packets on more links without touching the filters
// already in place (Apply replaces them all, opening every link for a
// moment). handles counts the filters per host.
func addCuts(n *netnsNet, handles map[string]int, cut ...link) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, l := range cut {
		to, ok := n.hosts[l.To]
		if _, ok2 := n.hosts[l.From]; !ok || !ok2 {
			return fmt.Errorf("cut %s→%s: unknown host", l.From, l.To)
		}
		handles[l.From]++
		err := run("ip", "netns", "exec", n.ns(l.From), "tc", "filter", "add", "dev", "eth0", "parent", "1:",
			"protocol", "ip", "prio", "10", "handle", strconv.Itoa(handles[l.From]), "bpf", "bytecode", bpfDropBytecode(net.ParseIP(to), 1), "classid", "1:2")
		if err != nil {
			return fmt.Errorf("cut %s→%s: %w", l.From, l.To, err)
		}
		n.applied[l.From] = true
	}
	return nil
}

// standToWin finds, in a witness's log, the last "standing now" after a
// refused pre-vote and the first election it won after it.
func standToWin(log string) (stood, won time.Time, ok bool) {
	for _, line := range strings.Split(log, "\n") {
		var l struct {
			Time    time.Time `json:"time"`
			Message string    `json:"message"`
		}
		if json.Unmarshal([]byte(line), &l) != nil {
			continue
		}
		switch {
		case strings.Contains(l.Message, "standing now to bring it up to date"):
			stood, won = l.Time, time.Time{}
		case l.Message == "election won" && !stood.IsZero() && won.IsZero():
			won = l.Time
		}
	}
	return stood, won, !stood.IsZero() && !won.IsZero()
}
