// Package heal ends a dual-active split of a pair without losing anything
// acknowledged: it detects the split, picks the winner with a rule both
// sides evaluate identically, moves the loser's unfinished work to the
// winner and makes the loser rejoin the winner's cluster as Standby.
//
// It owns the winner rule (Decide), the loser's merge procedure and its
// on-disk marker (heal-state.json in the data dir), the winner's side of
// the merge (Absorber, served over the control API's Heal service by
// package control), the heal status shown by scadactl status, and the heal
// metrics.
//
// It must not: change raft membership itself (raftnode's readmission adds
// the rejoined loser back), apply a loser's deploy on the winner (they are
// recorded as superseded, never applied), or run on anything but a pair
// whose peer is reachable and leads a cluster without this node.
//
// # Detection
//
// raftnode's peer probe (not raft) flags a configured peer that answers
// while leading a configuration without this node (Members().SplitBrain).
// The Manager on each Active side then asks the peer for its facts over the
// mutually authenticated Heal service. Both sides log "DUAL-ACTIVE", count
// scadad_heal_splits_detected_total, record a heal.split_detected audit
// entry and show the split in scadactl status.
//
// # Winner rule
//
// Both sides compare the same two HealFacts, so they reach the same verdict
// without talking it over (the winner re-checks it before accepting a
// merge, so a disagreement stops the heal instead of making two losers):
//
//  1. A preferred node, when both sides are configured with the same
//     preferred node id (cluster.heal_preferred) and it is one of the two.
//     Differing settings are ignored, so a half-done rollout cannot make
//     both sides win or both lose.
//  2. Otherwise the side whose override came first: the smaller leader
//     stamp of each side's newest committed cluster-epoch record (the
//     "override" audit entry that made its one-voter cluster). It has been
//     Active longest and usually holds the most. A side with no such record
//     (stamp 0) still runs its original cluster and wins.
//  3. Equal stamps: the smaller node id.
//
// # Merge (the loser)
//
// Every step is idempotent and the marker records the phase, so a SIGKILL
// of either side at any point resumes where it left off:
//
//  1. HealBegin: the winner re-checks the rule and records heal.begin.
//  2. Marker "fenced", then raftnode Fence: raft stops, the role drops to
//     Detached at once, workers stop; nothing can be acknowledged here any
//     more. A restart with this marker starts raft fenced.
//  3. Hand over, from the now frozen FSM: every pending and parked message
//     the winner does not hold (HealMissing, then HealMessages; enqueue by
//     id is idempotent), every remembered delivered or discarded id
//     (HealFinished; the winner drops those it still has pending), and the
//     split-era deploys and audit entries (those at or after the loser's
//     override record), recorded on the winner as heal.deploy_superseded
//     and heal.peer_audit entries keyed by merge id so a repeat adds none.
//  4. HealFinish: the winner raises the cluster epoch above both sides'
//     (fencing everything the loser's era stamped) and records heal.merged.
//  5. Marker "handed-over", then raftnode Rejoin: raft state and FSM are
//     wiped (the FSM must start empty: it skips entries at or below its own
//     applied index), raft is re-bootstrapped with the configured
//     membership, the winner re-adds it and it becomes Standby. A restart
//     with this marker wipes before raft starts.
//  6. The marker is removed.
//
// If the winner stays unreachable for AbandonAfter while the loser is
// fenced and has not finished the hand-over, the loser abandons the merge:
// it removes the marker and unfences, Active on its own cluster again
// (availability first, as in pair mode's override). What the winner
// already absorbed is idempotent; the next heal starts over.
//
// Parked messages of the loser arrive pending on the winner (a fresh round
// of retries). An id the loser discarded during the split counts as
// finished, like a delivered one: the operator's decision stands.
package heal
