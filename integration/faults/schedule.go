package faults

import (
	"math/rand/v2"
	"time"
)

// Fault kinds. Targets are resolved when the fault is injected (who is
// Active then), so a schedule is the same for a seed whatever happens.
const (
	faultPartition      = "partition"        // nodes split in two sides, both ways
	faultPartitionOne   = "partition-oneway" // one node's packets to another dropped
	faultIsolateActive  = "isolate-active"   // the Active cut from everyone (nodes, sink, clients)
	faultIsolateWitness = "isolate-witness"
	faultKillActive     = "kill-active" // SIGKILL, restarted at heal
	faultKillStandby    = "kill-standby"
	faultKillWitness    = "kill-witness"
	faultPauseShort     = "pause-active-short" // SIGSTOP shorter than the election timeout
	faultPauseLong      = "pause-active-long"  // SIGSTOP longer than the election timeout
	faultPauseStandby   = "pause-standby"
	faultRestart        = "restart" // SIGTERM and start again, any node
	faultLoss           = "loss"    // tc BPF random drop between nodes
	faultLatency        = "latency" // delay on the clients' connections
	faultKillAll        = "kill-all"
	// Pair mode only: a partition shorter / longer than override_after.
	faultPairShort = "partition-under-override"
	faultPairLong  = "partition-over-override"
)

// electionTimeout is the nodes' configured election timeout (the default).
const electionTimeout = 500 * time.Millisecond

// fault is one scheduled fault.
type fault struct {
	Kind  string        `json:"kind"`
	Hold  time.Duration `json:"hold_ns"`
	Param float64       `json:"param,omitempty"` // loss fraction, latency in ms
	Pick  uint64        `json:"pick"`            // chooses among candidate targets
}

// round is one or two faults injected together, held, then healed.
type round struct {
	Index  int     `json:"index"`
	Faults []fault `json:"faults"`
}

// kindsFor lists the faults a mode's random schedule draws from.
func kindsFor(mode string, witness bool) []string {
	ks := []string{
		faultPartitionOne, faultIsolateActive, faultKillActive, faultKillStandby,
		faultPauseShort, faultPauseLong, faultPauseStandby, faultRestart, faultLoss, faultLatency, faultKillAll,
	}
	switch mode {
	case "pair":
		// A partition of a pair longer than override_after splits it for
		// good (no heal yet); the pair schedule ends with one on purpose.
		return append(ks[:0:0], faultKillActive, faultKillStandby, faultPauseShort, faultPauseLong, faultRestart, faultLoss, faultLatency, faultKillAll, faultPairShort)
	}
	ks = append(ks, faultPartition)
	if witness {
		ks = append(ks, faultIsolateWitness, faultKillWitness)
	}
	return ks
}

// combinable faults may join another in the same round.
var combinable = map[string]bool{
	faultLoss: true, faultLatency: true, faultKillStandby: true, faultPauseStandby: true,
	faultPartitionOne: true, faultKillWitness: true, faultIsolateWitness: true,
}

// newSchedule draws n rounds from seed; the same seed gives the same
// schedule. Pair mode appends one partition longer than overrideAfter.
func newSchedule(seed uint64, n int, mode string, witness bool, overrideAfter time.Duration) []round {
	rng := rand.New(rand.NewPCG(seed, seed^0x5ca1ab1e))
	kinds := kindsFor(mode, witness)
	var combos []string
	for _, k := range kinds {
		if combinable[k] {
			combos = append(combos, k)
		}
	}
	var out []round
	for i := 0; i < n; i++ {
		r := round{Index: i + 1, Faults: []fault{drawFault(rng, kinds[rng.IntN(len(kinds))], overrideAfter)}}
		if rng.Float64() < 0.25 && len(combos) > 0 {
			second := combos[rng.IntN(len(combos))]
			if second != r.Faults[0].Kind {
				f := drawFault(rng, second, overrideAfter)
				f.Hold = r.Faults[0].Hold // held and healed together
				r.Faults = append(r.Faults, f)
			}
		}
		out = append(out, r)
	}
	if mode == "pair" {
		out = append(out, round{Index: n + 1, Faults: []fault{drawFault(rng, faultPairLong, overrideAfter)}})
	}
	return out
}

// newScheduleOf draws n rounds of single faults of the given kinds alone,
// for measuring them (-kinds): failover after a partition against after a
// SIGKILL, say. The same seed gives the same schedule.
func newScheduleOf(seed uint64, n int, kinds []string, overrideAfter time.Duration) []round {
	rng := rand.New(rand.NewPCG(seed, seed^0x5ca1ab1e))
	var out []round
	for i := 0; i < n; i++ {
		out = append(out, round{Index: i + 1, Faults: []fault{drawFault(rng, kinds[rng.IntN(len(kinds))], overrideAfter)}})
	}
	return out
}

func drawFault(rng *rand.Rand, kind string, overrideAfter time.Duration) fault {
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
	f := fault{Kind: kind, Pick: rng.Uint64(), Hold: between(time.Second, 3*time.Second)}
	switch kind {
	case faultPauseShort:
		f.Hold = between(electionTimeout/4, electionTimeout*7/10)
	case faultPauseLong:
		f.Hold = between(3*electionTimeout, 6*electionTimeout)
	case faultLoss:
		f.Param = 0.1 + 0.3*rng.Float64()
	case faultLatency:
		f.Param = float64(20 + rng.IntN(180))
	case faultPairShort:
		f.Hold = between(overrideAfter/4, overrideAfter/2)
	case faultPairLong:
		f.Hold = overrideAfter + between(2*time.Second, 4*time.Second)
	case faultKillAll:
		f.Hold = between(300*time.Millisecond, time.Second)
	}
	return f
}

// faultEvent is what happened to one fault of one round.
type faultEvent struct {
	Round     int       `json:"round"`
	Kind      string    `json:"kind"`
	Targets   []string  `json:"targets"`
	Start     time.Time `json:"start"`
	Healed    time.Time `json:"healed"`
	Recovered time.Time `json:"recovered,omitempty"`
	// EpochBefore is the Active's epoch when the fault was injected.
	EpochBefore string `json:"epoch_before,omitempty"`
	// Failover is how long until a node answered Active under another
	// epoch, for faults that take the Active away.
	Failover *time.Duration `json:"failover_ns,omitempty"`
	// NeedsFailover marks faults that take the Active away.
	NeedsFailover bool   `json:"needs_failover"`
	Note          string `json:"note,omitempty"`
}
