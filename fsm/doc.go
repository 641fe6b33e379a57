// Package fsm is scadad's replicated state machine: the site's deployed
// configuration artifacts and pointers, the store-and-forward buffer, the
// cluster epoch, the audit trail and the alarm state, kept in one bbolt file and changed only
// by Raft log entries.
//
// It owns:
//   - the command envelope (fsmpb.Command) and its Encode/Decode;
//   - the deterministic Apply of every command: no clocks (the leader stamps
//     times into commands), no randomness, no map-order dependence; a command
//     that cannot be decoded or validated changes nothing but the applied
//     index and yields the same *CommandError on every node;
//   - the on-disk state: the applied index is written in the same bbolt
//     transaction as the entry's effects, so a restart replays nothing twice;
//     that transaction may be held open across batches (Options.CommitBytes,
//     FSM.Commit), reads seeing its entries, and committed before every
//     snapshot, backup, restore and close;
//     commits may skip fsync (Options.DeferSync) under a marker naming the
//     OS boot, and a file left unsynced by an earlier boot is refused
//     (ErrUnsyncedState) for the caller to rebuild from raft;
//   - snapshots (a consistent read transaction streamed out, compressed and
//     checksummed) and atomic restore;
//   - the read side used by the workers (safe concurrently with Apply).
//
// It must not: talk to the network, start goroutines, read the wall clock or
// know about Raft roles. hashicorp/raft drives it through raft.BatchingFSM;
// package raftnode wires it.
//
// # Bucket layout
//
//	meta                     applied_index, applied_term, schema_version,
//	                         cluster_epoch, audit_seq, delivered_seq (uint64 BE)
//	artifacts/<sha>/         "info" → ArtifactState, "c"+uint32 BE → chunk bytes
//	deploy/<target>/         "ptr" → DeployPointer,
//	                         "history"/uint64 BE rev → DeployRecord,
//	                         "acks"/<node id> → DeployAckRecord
//	sf/pending/<target>/     uint64 BE seq → StoredMessage (FIFO)
//	sf/parked/<target>/      uint64 BE park seq → StoredMessage
//	sf/ids/                  id → MessageLocation (pending and parked only)
//	sf/delivered/            id → uint64 BE tombstone seq
//	sf/delivered_order/      uint64 BE tombstone seq → id (evicts oldest
//	                         beyond DeliveredTombstones)
//	sf/targets/              target → TargetCounters
//	audit/                   uint64 BE seq → AuditRecord
//	features/                node id → NodeFeatures (added by v0.2.0 in
//	                         place; v0.1.0 ignores it, schema stays 1)
//	alarms/state/            alarm id → AlarmRecord (v0.2.0, level 3; made by
//	                         the first alarm command; records are kept so an
//	                         alarm's transition numbers never start over)
//	alarms/log/              uint64 BE log seq → AlarmTransition (the newest
//	                         MaxAlarmLog); alarms "log_seq", "history_mark"
//
// # Feature levels
//
// Every command body needs an FSM feature level, declared in ONE table:
// commandLevel in levels.go (TestEveryCommandHasALevel fails for a body
// missing from it). Level 1 is what v0.1.0 applies; FeatureLevel is the
// highest this build applies; levelRelease names the release that
// introduced each level. To add a command: add its body to the proto, add
// it to commandLevel at FeatureLevel (raising FeatureLevel and
// levelRelease first if this release has not yet), handle it in
// applyCommand. Encode stamps the level and its release into the envelope
// (Command.feature_level, needs_release), so a node that does not know the
// body still knows what it needs. The leader's featuregate.Gate refuses a
// command above the cluster's level (ClusterLevel of the members'
// RecordFeatures records) before raft sees it; a node that meets an entry
// above its level anyway stops applying there (ApplyBlocked): the applied
// index stays before it, Snapshot and Restore are refused, nothing after
// it is applied, and a restart on a newer build applies it and the rest.
// FeatureProbe, at FeatureLevel+1, exists only to prove the gate and the
// fail-stop in tests (Options.FeatureLevel raises a test FSM's level).
//
// # Snapshot format (version 2; version 1 is read too)
//
//	"SCADAFSM" | uint32 BE format version | uint32 BE flags (0)
//	frames:  uint32 BE length (1..MaxFrame) | bytes      — the gzip of bbolt tx.WriteTo
//	end:     uint32 BE 0 | uint64 BE total framed bytes | SHA-256 of the framed bytes
//	         | state digest (FSM.Digest of the same read transaction; version 2)
//
// A stream that ends before the end marker is truncated; a digest mismatch,
// bytes after the end marker, a decoded state that fails bbolt's consistency
// check or whose digest differs from the one carried are corruption. Either
// way Restore refuses it and the running state is kept.
package fsm
