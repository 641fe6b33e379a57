// Package storeforward is scadad's store-and-forward service on top of the
// replicated buffer in package fsm.
//
// It owns:
//   - Enqueue (Enqueuer): validates a message against the configured
//     targets and group-commits concurrent enqueues into SFEnqueue commands
//     (many messages per Raft entry); it returns only after the entry is
//     committed. The message id is the idempotency key. Also the HTTP API
//     POST /v1/sf/{target}.
//   - Delivery (Deliverer): on the Active node only, one worker per target
//     hands pending messages, in FIFO order and in batches up to the
//     target's BatchMaxMessages/BatchMaxBytes, to its kind's Sender (Kind:
//     HTTP is built in, DelivererOptions.Kinds adds others; the HTTP kind
//     POSTs one message or a JSON/NDJSON batch) with Idempotency-Key and
//     X-Scadad-Epoch headers, parks a message the target refuses for good
//     at once (Refusal, classify, the target's ParkOn), backs off
//     exponentially with jitter (or the receiver's Retry-After) on other
//     failures, parks a message after the target's max attempts, records
//     failed attempts with batched SFAttempts commands and removes
//     delivered ids with batched SFDelivered commands. Every delivery is
//     preceded by a check that the node is still Active in the epoch the
//     worker was started under; a role change cancels in-flight requests.
//   - Operator functions (Operator): stats, list, retry and discard.
//   - Tag history forwarding (HistoryForwarder): batches tag updates into
//     JSON messages enqueued to the target a rule names, in order; a batch
//     over the target's payload limit goes in halves, and only what no
//     retry can store (a lone oversized value) is dropped, counted.
//   - Its Prometheus metrics, registered on a Registerer it is given.
//
// Delivery is at-least-once: a message delivered just before the Active node
// dies, or before its SFDelivered commits, is delivered again by the next
// Active node with the same Idempotency-Key. Failed attempts are
// replicated (at most AttemptsInterval late), so a new Active node counts
// on from the buffer's count.
//
// It must not: write the buffer other than through the Proposer (Raft), read
// the FSM's files, deliver anything unless the role source says Active, or
// know about Raft itself (the daemon supplies a Proposer that commits on the
// leader and forwards from followers).
package storeforward
