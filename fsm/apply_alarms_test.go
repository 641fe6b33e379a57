package fsm

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/scadad/scadad/fsm/fsmpb"
)

func observe(conds ...*fsmpb.AlarmCondition) *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_AlarmObserve{AlarmObserve: &fsmpb.AlarmObserve{Conditions: conds}}}
}

func refresh(conn, source string, conds ...*fsmpb.AlarmCondition) *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_AlarmObserve{AlarmObserve: &fsmpb.AlarmObserve{Conditions: conds, RefreshSource: source, RefreshConnection: conn}}}
}

func ackCmd(id, op, comment string, confirm bool) *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_AlarmAck{AlarmAck: &fsmpb.AlarmAck{AlarmId: id, Operator: op, Comment: comment, Confirm: confirm}}}
}

func cond(id string, active, acked bool, gwSeq uint64) *fsmpb.AlarmCondition {
	return &fsmpb.AlarmCondition{AlarmId: id, Source: "Z28061", ConditionName: "HiLevel", Severity: 700, Message: "level high",
		Active: active, Acked: acked, GatewaySeq: gwSeq, Kind: "native", Connection: "mx1"}
}

func kinds(r *Result) []string {
	var out []string
	for _, t := range r.Alarm.Transitions {
		out = append(out, fmt.Sprintf("%s#%d", t.Kind, t.Seq))
	}
	return out
}

func TestAlarmLifecycleNumbersTransitionsPerAlarm(t *testing.T) {
	f := openTestFSM(t)
	w := newLogWriter(t)
	if got := fmt.Sprint(kinds(mustOK(t, f, w.cmd(observe(cond("A1", true, false, 1), cond("A2", true, false, 1)))))); got != "[raised#1 raised#1]" {
		t.Fatalf("raise: %s", got)
	}
	// The same report again (a refresh, a duplicate) changes nothing.
	if r := mustOK(t, f, w.cmd(observe(cond("A1", true, false, 1)))); !r.Alarm.Unchanged {
		t.Fatalf("duplicate observe made %v", kinds(r))
	}
	r := mustOK(t, f, w.cmd(ackCmd("A1", "alice", "on it", false)))
	if got := fmt.Sprint(kinds(r)); got != "[acknowledged#2]" {
		t.Fatalf("ack: %s", got)
	}
	// Acknowledging again keeps the first acknowledgement.
	if r := mustOK(t, f, w.cmd(ackCmd("A1", "bob", "", false))); !r.Alarm.Unchanged {
		t.Fatalf("second ack made %v", kinds(r))
	}
	if got := fmt.Sprint(kinds(mustOK(t, f, w.cmd(ackCmd("A1", "alice", "", true))))); got != "[confirmed#3]" {
		t.Fatalf("confirm: %s", got)
	}
	if r := applyOne(t, f, w.cmd(ackCmd("A2", "alice", "", true))); r.Err == nil {
		t.Fatal("confirm before acknowledge accepted")
	}
	// The field acknowledged A2 (an HMI) and cleared A1.
	hmi := cond("A2", true, true, 2)
	hmi.AckOperator = "hmi"
	r = mustOK(t, f, w.cmd(observe(cond("A1", false, true, 3), hmi)))
	if got := fmt.Sprint(kinds(r)); got != "[cleared#4 acknowledged#2]" {
		t.Fatalf("field changes: %s", got)
	}
	a1, ok, err := f.Alarm("A1")
	if err != nil || !ok || a1.Active || !a1.Acked || a1.AckOperator != "alice" || a1.AckComment != "on it" || a1.Seq != 4 || !a1.Confirmed {
		t.Fatalf("A1 = %+v (%v, %v)", a1, ok, err)
	}
	a2, _, _ := f.Alarm("A2")
	if a2.AckOperator != "hmi" {
		t.Fatalf("A2 acknowledged by %q, want hmi", a2.AckOperator)
	}
	// A new activation needs a new acknowledgement.
	r = mustOK(t, f, w.cmd(observe(cond("A1", true, false, 4))))
	if got := fmt.Sprint(kinds(r)); got != "[raised#5]" {
		t.Fatalf("re-raise: %s", got)
	}
	if a1, _, _ = f.Alarm("A1"); a1.Acked || a1.Confirmed || a1.AckOperator != "" {
		t.Fatalf("re-raised A1 still acknowledged: %+v", a1)
	}
	last, mark, err := f.AlarmLogPosition()
	if err != nil || last != 7 || mark != 0 {
		t.Fatalf("log position %d mark %d (%v), want 7 and 0", last, mark, err)
	}
	log, err := f.AlarmLogAfter(5, 100)
	if err != nil || len(log) != 2 || log[0].LogSeq != 6 || log[1].AlarmId != "A1" || log[1].Seq != 5 {
		t.Fatalf("log after 5: %+v (%v)", log, err)
	}
}

// TestAlarmStateReplicatedAckWinsOverTheField is the failover case: an
// acknowledgement recorded through raft stays, even when the gateway (which
// it never reached) still reports the alarm unacknowledged.
func TestAlarmStateReplicatedAckWinsOverTheField(t *testing.T) {
	f := openTestFSM(t)
	w := newLogWriter(t)
	mustOK(t, f, w.cmd(observe(cond("A1", true, false, 1))))
	mustOK(t, f, w.cmd(ackCmd("A1", "alice", "", false)))
	if r := mustOK(t, f, w.cmd(refresh("mx1", "Z28061", cond("A1", true, false, 1)))); !r.Alarm.Unchanged {
		t.Fatalf("refresh with the gateway unaware of the ack made %v", kinds(r))
	}
	if a, _, _ := f.Alarm("A1"); !a.Acked || a.AckOperator != "alice" {
		t.Fatalf("the replicated ack was lost: %+v", a)
	}
}

func TestAlarmRefreshClearsWhatTheSnapshotLacks(t *testing.T) {
	f := openTestFSM(t)
	w := newLogWriter(t)
	other := cond("B1", true, false, 1)
	other.Source = "Z28062"
	mustOK(t, f, w.cmd(observe(cond("A1", true, false, 1), cond("A2", true, false, 1), other)))
	r := mustOK(t, f, w.cmd(refresh("mx1", "Z28061", cond("A2", true, false, 1))))
	if got := fmt.Sprint(kinds(r)); got != "[cleared#2]" || r.Alarm.Transitions[0].AlarmId != "A1" {
		t.Fatalf("refresh: %s", got)
	}
	if b, _, _ := f.Alarm("B1"); !b.Active {
		t.Fatal("a refresh of one source cleared another's alarm")
	}
	if r := applyOne(t, f, w.cmd(refresh("mx1", "Z28061", other))); r.Err == nil {
		t.Fatal("a refresh holding another source's alarm was accepted")
	}
}

func TestAlarmCommandsRefuseBadInput(t *testing.T) {
	f := openTestFSM(t)
	w := newLogWriter(t)
	bad := cond("A1", true, false, 1)
	bad.Severity = 1001
	for name, c := range map[string]*fsmpb.Command{
		"severity over 1000":  observe(bad),
		"empty observe":       observe(),
		"ack of unknown":      ackCmd("nope", "alice", "", false),
		"ack without a name":  ackCmd("A1", "", "", false),
		"twice in one":        observe(cond("A1", true, false, 1), cond("A1", false, false, 2)),
		"mark beyond the log": {Body: &fsmpb.Command_AlarmHistoryMark{AlarmHistoryMark: &fsmpb.AlarmHistoryMark{Seq: 5}}},
	} {
		before := alarmState(t, f)
		if r := applyOne(t, f, w.cmd(c)); r.Err == nil {
			t.Errorf("%s: accepted", name)
		}
		if alarmState(t, f) != before {
			t.Errorf("%s: a refused command changed the alarm state", name)
		}
	}
}

// TestAlarmApplyIsDeterministic applies one sequence of alarm commands on
// two FSMs and compares their digests.
func TestAlarmApplyIsDeterministic(t *testing.T) {
	var logs []*raft.Log
	w := newLogWriter(t)
	for i := range 50 {
		id := fmt.Sprintf("A%02d", i%10)
		logs = append(logs, w.cmd(observe(cond(id, i%3 != 0, i%4 == 0, uint64(i+1)))))
		if i%5 == 0 {
			logs = append(logs, w.cmd(ackCmd(id, "op", "c", false)))
		}
	}
	logs = append(logs, w.cmd(refresh("mx1", "Z28061", cond("A01", true, false, 100))))
	logs = append(logs, w.cmd(&fsmpb.Command{Body: &fsmpb.Command_AlarmShelve{AlarmShelve: &fsmpb.AlarmShelve{AlarmId: "A01", Operator: "op", Shelve: true}}}))
	logs = append(logs, w.cmd(&fsmpb.Command{Body: &fsmpb.Command_AlarmComment{AlarmComment: &fsmpb.AlarmComment{AlarmId: "A01", Operator: "op", Comment: "checked"}}}))
	logs = append(logs, w.cmd(&fsmpb.Command{Body: &fsmpb.Command_AlarmHistoryMark{AlarmHistoryMark: &fsmpb.AlarmHistoryMark{Seq: 3}}}))
	a, b := openTestFSM(t), openTestFSM(t)
	for _, l := range logs {
		ra, rb := applyOne(t, a, l), applyOne(t, b, l)
		if fmt.Sprint(ra.Err) != fmt.Sprint(rb.Err) {
			t.Fatalf("entry %d: %v vs %v", l.Index, ra.Err, rb.Err)
		}
	}
	// And in one batch on a third.
	c := openTestFSM(t)
	c.ApplyBatch(logs)
	if da, db, dc := digest(t, a), digest(t, b), digest(t, c); da != db || da != dc {
		t.Fatalf("digests differ: %s %s %s", da, db, dc)
	}
	rec, _, _ := a.Alarm("A01")
	if !rec.Shelved || rec.LastComment != "checked" {
		t.Fatalf("A01 = %+v, want shelved with the comment", rec)
	}
	if _, mark, _ := a.AlarmLogPosition(); mark != 3 {
		t.Fatalf("history mark %d, want 3", mark)
	}
}

func alarmState(t *testing.T, f *FSM) string {
	t.Helper()
	recs, err := f.Alarms()
	if err != nil {
		t.Fatal(err)
	}
	last, mark, err := f.AlarmLogPosition()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(recs, last, mark)
}
