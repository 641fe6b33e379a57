// Package alarms owns scadad's alarm state machine outside the FSM: it
// turns what the field reports (gateway alarm snapshots and transitions
// from package subscribe, limit alarms it evaluates from tag values) into
// replicated FSM commands, acknowledges alarms on the gateway and in the
// FSM, re-sends to the gateway the replicated acknowledgements it lacks
// after a failover, enqueues every alarm transition exactly once (by the
// deterministic id alarm:<alarm id>:<seq>) to the alarm-history target,
// and keeps the alarm metrics.
//
// Every node evaluates limit alarms from the same values (warm state) and
// follows the replicated state; only the Active proposes observations,
// reaches the gateway with acknowledgements and emits history, under the
// one policy of package activegate, denials counted.
//
// It must not: talk to raft (a Proposer commits), to the gateway's wire
// (an Acknowledger does), deliver anything (store-and-forward does), or
// know OPC UA (the OPC UA server reads the state it exposes).
package alarms
