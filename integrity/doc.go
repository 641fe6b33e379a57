// Package integrity keeps this node's state file trustworthy: the scrub
// that reads it whole every interval (Scrubber), the cross-node
// checkpoints that compare the voters' state digests and follow their
// verdicts (Checkpointer), and the answer to a damaged or diverged state,
// which fences the node and has it rebuilt from the leader's snapshot
// where a majority can lead without it (Scrubber.Rebuild).
//
// It must not apply commands or read the raft log itself: digests come
// from the FSM, commands go through a Proposer, and the rebuild through a
// Rejoiner (the raft node). In pair mode it only alerts: the peer cannot
// lead alone, so the operator chooses.
package integrity
