// Package raftnode owns the hashicorp/raft wiring of a scadad node: the
// raft-boltdb log and stable store (whose mapped pages it hands back through
// Config.ReleaseLogPages), the file snapshot store (never leaving a partial
// snapshot behind), the mutual-TLS
// transport, bootstrap from the configured membership, the witness hand-off,
// the pair-mode availability override, the re-admission of a returning peer,
// and the role stream (Active / Standby / Witness / Detached) that every
// worker follows, with its acting view (Node.Acting): Active only while a
// quorum confirmed the leadership recently, what side effects act on.
//
// raftnode must not: interpret commands (the FSM does), decide what an epoch
// bump records (the OnOverride callback the wirer supplies does), run any
// workload, talk plaintext, or keep package-level state.
//
// # Dead leader
//
// raft's follower looks at its leader's last contact only when its own
// heartbeat timer fires, re-armed then for a random one to two timeouts,
// so it notices a dead leader one to three timeouts after its last word.
// The dead-leader watch (deadleader.go) checks the last contact every
// heartbeat interval and makes raft stand at once when it is a timeout
// (plus jitter) old, through raft's public ReloadConfig.
//
// # The leader's log write
//
// hashicorp/raft's leader appends and fsyncs new entries before it
// replicates them. With LeaderWriteParallel (the default) the log store
// (parallelLog, leaderlog.go) queues a leader's entries for a background
// writer and returns at once, so the leader's fsync and its followers'
// overlap. Raft counts the leader's copy when StoreLogs returns; the
// transport holds each follower's successful answer until the leader's
// own copy of those entries is synced, and the FSM is handed an entry
// only once the node's own copy is: a commit needs two disks and nothing
// applied can be lost with this node. Followers and a lone voter write
// before they return, as raft expects.
//
// # The log's segments
//
// raft-wal's segments are created by its own file system but written
// through segmentFiles (walsegments.go): zeroed a MiB ahead of the log's
// appends and, after a new segment's first full sync, synced with
// fdatasync, so that on ext4 an append's sync flushes the appended data
// and commits no journal (raft-wal's preallocated blocks are unwritten, and
// turning them written is a journaled change on every append).
//
// # Storage that stops answering
//
// A disk that hangs instead of failing leaves a leader that raft never
// deposes: its replication goroutines keep heartbeating while it commits
// nothing (a commit waits for its own copy) or applies nothing, and once 128
// batches wait for the FSM raft's leader loop, which answers VerifyLeader and
// checks the leader lease, waits too. raftnode times each raft log write,
// apply and snapshot of the FSM (storagestall.go) and reports one that has not
// returned within the caller's limit (Node.StorageStalled); the daemon stops
// on it. A leader that no quorum has confirmed for 2 s logs it once, with
// raft's queue to the FSM, and again when it is confirmed.
//
// # Override and rejoin
//
// A pair-mode node that has had no contact at all with its peer for
// OverrideAfter re-forms the cluster alone: raft.RecoverCluster with itself
// as the only voter, a fresh transport, leadership, then OnOverride records
// the epoch bump; only then is the node Active. Contact is any raft byte
// received from the peer, any inbound connection or probe from it, raft's
// own LastContact, or a probe of ours it answers (a TLS handshake on the raft
// port, every ProbeInterval); the override re-probes once more right before
// acting. So the override never fires while the peer answers, and the
// seeds' islanding race cannot happen.
//
// When a configured member that is missing from the configuration answers
// probes again, the leader adds it back as a voter. The probe answer carries
// the peer's own voter list: a peer whose list still names us (an old member
// coming back, or a fresh one that bootstrapped the configured membership)
// is re-added and catches up by log matching or snapshot. Every node
// bootstraps the same sorted configuration at index 1, term 1, so a fresh
// peer's index-1 entry matches the survivor's history (which RecoverCluster
// compacted into a snapshot at or after that index) and raft's
// AppendEntries consistency check lets it in without a second cluster. A
// peer whose list does not name us leads a cluster of its own (a partition
// ended in dual-active): it is never merged, because its FSM has applied
// entries our log does not have. It is logged as DUAL-ACTIVE and flagged in
// Members so the heal procedure can act; that procedure (which picks the
// winner and moves the loser's unacknowledged work over) ends by calling
// Rejoin on the loser, which discards its raft state and FSM and is
// re-admitted as Standby.
package raftnode
