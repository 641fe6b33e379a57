package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/alarms"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// simAlarm drives the simulator's alarm admin API.
func simAlarm(t *testing.T, sim *testcluster.Sim, op string, q url.Values) {
	t.Helper()
	resp, err := http.Post("http://"+sim.Admin+"/alarms/"+op+"?"+q.Encode(), "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sim alarms/%s %v: %s", op, q, resp.Status)
	}
}

type simAlarmStats struct {
	Alarms struct {
		Acks []struct {
			AlarmID  string `json:"alarm_id"`
			Operator string `json:"operator"`
			Epoch    string `json:"epoch"`
		} `json:"acks"`
	} `json:"alarms"`
}

func simAlarmAcks(t *testing.T, sim *testcluster.Sim) simAlarmStats {
	t.Helper()
	resp, err := http.Get("http://" + sim.Admin + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st simAlarmStats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// alarmRow is scadactl alarms list --output json's row.
type alarmRow struct {
	ID          string `json:"id"`
	Active      bool   `json:"active"`
	Acked       bool   `json:"acked"`
	AckOperator string `json:"ack_operator"`
	Seq         uint64 `json:"seq"`
}

func listAlarms(t *testing.T, c *testcluster.Cluster, n *testcluster.Node) map[string]alarmRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var rows []alarmRow
	if err := c.CtlJSON(ctx, []*testcluster.Node{n}, &rows, "alarms", "list"); err != nil {
		t.Fatal(err)
	}
	out := map[string]alarmRow{}
	for _, r := range rows {
		out[r.ID] = r
	}
	return out
}

func alarmID(i int) string { return fmt.Sprintf("A%03d", i) }

// TestAlarmStateAndHistorySurviveASIGKILL: 100 active gateway alarms, 50
// acknowledged through scadactl on the Active (reaching the simulator with
// the Active's epoch; refused on the Standby); the Active is SIGKILLed and
// an alarm clears during the failover. The survivor shows the same 100,
// the same 50 acknowledged by the same operator, the clear, and the sink
// has every transition exactly once by id.
func TestAlarmStateAndHistorySurviveASIGKILL(t *testing.T) {
	sim := startSim(t)
	sink := startSink(t, "-bodies")
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	standby := otherVoter(t, c, active)
	for i := range 100 {
		simAlarm(t, sim, "raise", url.Values{"id": {alarmID(i)}, "source": {"Pump1"}, "severity": {fmt.Sprint(100 + i*9)},
			"condition": {"HiLevel"}, "message": {"level high"}})
	}
	site := testcluster.SiteConfigGateway("alarms", sim.Addr, map[string]string{"historian": sink.URL}, 0)
	site = append(site, `alarms:
  history_target: historian
  sources:
    - {connection: gw, source: Pump1}
`...)
	deploySite(t, c, site)
	testwait.For(t, 30*time.Second, "100 active alarms in the replicated state", func() bool {
		rows := listAlarms(t, c, active)
		n := 0
		for _, r := range rows {
			if r.Active {
				n++
			}
		}
		return n == 100
	})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Refused on the Standby: the gateway never hears of it.
	_, errs, code, err := c.Ctl(ctx, []*testcluster.Node{standby}, "alarms", "ack", alarmID(0))
	if err != nil || code == 0 || !strings.Contains(errs, "not the Active") {
		t.Fatalf("ack on the Standby: exit %d, %q (%v); want a refusal naming the role", code, errs, err)
	}
	if acks := simAlarmAcks(t, sim).Alarms.Acks; len(acks) != 0 {
		t.Fatalf("the Standby's ack reached the gateway: %+v", acks)
	}
	for i := 0; i < 100; i += 2 {
		if _, errs, code, err := c.Ctl(ctx, []*testcluster.Node{active}, "alarms", "ack", alarmID(i), "--comment", "seen"); err != nil || code != 0 {
			t.Fatalf("ack %s on the Active: exit %d %s (%v)", alarmID(i), code, errs, err)
		}
	}
	acks := simAlarmAcks(t, sim).Alarms.Acks
	if len(acks) != 50 {
		t.Fatalf("%d acks reached the gateway, want 50", len(acks))
	}
	epoch := acks[0].Epoch
	operator := acks[0].Operator
	for _, a := range acks {
		if a.Epoch == "" || a.Epoch != epoch || a.Operator == "" || a.Operator != operator {
			t.Fatalf("gateway ack %+v, want every ack by %q at the Active's epoch %q", a, operator, epoch)
		}
	}
	before := listAlarms(t, c, active)

	// SIGKILL the Active; two alarms clear while there is none.
	c.Kill(active)
	simAlarm(t, sim, "clear", url.Values{"id": {alarmID(3)}}) // unacknowledged
	simAlarm(t, sim, "clear", url.Values{"id": {alarmID(4)}}) // acknowledged
	survivor := waitOneActive(t, c, 30*time.Second)
	if survivor != standby {
		t.Fatalf("survivor %s, want the Standby %s", survivor.ID, standby.ID)
	}
	var after map[string]alarmRow
	testwait.For(t, 30*time.Second, "the survivor shows the clears of the failover", func() bool {
		after = listAlarms(t, c, survivor)
		return !after[alarmID(3)].Active && !after[alarmID(4)].Active
	})
	active2, acked := 0, 0
	for i := range 100 {
		id := alarmID(i)
		r, ok := after[id]
		if !ok {
			t.Fatalf("alarm %s missing on the survivor", id)
		}
		if r.Active {
			active2++
		}
		if r.Acked {
			acked++
			if r.AckOperator != before[id].AckOperator || r.AckOperator == "" {
				t.Fatalf("alarm %s acknowledged by %q on the survivor, %q before", id, r.AckOperator, before[id].AckOperator)
			}
		}
		if r.Acked != (i%2 == 0) {
			t.Fatalf("alarm %s acked=%v on the survivor, want %v", id, r.Acked, i%2 == 0)
		}
	}
	if len(after) != 100 || active2 != 98 || acked != 50 {
		t.Fatalf("survivor: %d alarms, %d active, %d acknowledged; want 100, 98, 50", len(after), active2, acked)
	}

	// Every transition at the sink exactly once by id: 100 raises, 50
	// acknowledgements, 2 clears.
	want := map[string]bool{}
	for i := range 100 {
		want[alarms.HistoryID(alarmID(i), 1)] = true
		if i%2 == 0 {
			want[alarms.HistoryID(alarmID(i), 2)] = true
		}
	}
	want[alarms.HistoryID(alarmID(3), 2)] = true
	want[alarms.HistoryID(alarmID(4), 3)] = true
	var got map[string]int
	testwait.For(t, 60*time.Second, fmt.Sprintf("all %d transitions at the sink", len(want)), func() bool {
		ds, err := sink.Deliveries()
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]int{}
		for _, d := range ds {
			if d.Status/100 == 2 {
				got[d.ID]++
			}
		}
		return len(got) >= len(want)
	})
	var extra, missing []string
	repeats := 0
	for id, n := range got {
		if !want[id] {
			extra = append(extra, id)
		}
		repeats += n - 1
	}
	for id := range want {
		if got[id] == 0 {
			missing = append(missing, id)
		}
	}
	sort.Strings(extra)
	sort.Strings(missing)
	if len(extra) > 0 || len(missing) > 0 {
		t.Fatalf("alarm history at the sink: unexpected %v, missing %v", extra, missing)
	}
	t.Logf("%d transitions at the sink by id; %d deliveries repeated an id (at-least-once delivery, collapsed by the receiver)", len(got), repeats)
}

type limitRow struct {
	ID      string `json:"id"`
	Active  bool   `json:"active"`
	State   string `json:"state"`
	Shelved bool   `json:"shelved"`
	Seq     uint64 `json:"seq"`
}

// TestLimitAlarmEvaluatedOnEveryVoterRecordedOnce: a limit alarm on a
// rising value (hot standby: both voters read it and evaluate) is raised
// once after its on-delay, shelved through the Standby, and after a
// SIGKILL of the Active the survivor, which evaluated the same level all
// along, records nothing new: the sink has each transition once.
func TestLimitAlarmEvaluatedOnEveryVoterRecordedOnce(t *testing.T) {
	sim := startSim(t, "-change", "100ms")
	sink := startSink(t)
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	standby := otherVoter(t, c, active)
	site := testcluster.SiteConfigGateway("limits", sim.Addr, map[string]string{"historian": sink.URL}, 0)
	site = append([]byte("hot_standby: true\n"), site...)
	site = append(site, `alarms:
  history_target: historian
  limits:
    - name: Pump1.Speed.Limit
      instance: Pump1
      attribute: Speed
      hi: {limit: 20, severity: 800}
      hi_hi: {limit: 1000000000, severity: 950}
      deadband: 1
      on_delay: 500ms
      message: pump speed
`...)
	deploySite(t, c, site)
	const id = "Pump1.Speed.Limit"
	row := func(n *testcluster.Node) limitRow {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var rows []limitRow
		if err := c.CtlJSON(ctx, []*testcluster.Node{n}, &rows, "alarms", "list"); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.ID == id {
				return r
			}
		}
		return limitRow{}
	}
	testwait.For(t, 60*time.Second, "the limit alarm raised at Hi", func() bool { r := row(active); return r.Active && r.State == "Hi" })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, errs, code, err := c.Ctl(ctx, []*testcluster.Node{standby}, "alarms", "shelve", id, "--comment", "maintenance"); err != nil || code != 0 {
		t.Fatalf("shelve through the Standby: exit %d %s (%v)", code, errs, err)
	}
	testwait.For(t, 20*time.Second, "shelved on the Standby's replica", func() bool { return row(standby).Shelved })
	if r := row(active); r.Seq != 2 {
		t.Fatalf("limit alarm at seq %d, want 2 (raised, shelved): a second node recorded it", r.Seq)
	}
	c.Kill(active)
	survivor := waitOneActive(t, c, 30*time.Second)
	// The survivor records what it evaluated as Standby: the same level, so
	// nothing new. Wait for its history to be emitted, then check.
	want := []string{alarms.HistoryID(id, 1), alarms.HistoryID(id, 2)}
	testwait.For(t, 30*time.Second, "both transitions at the sink", func() bool {
		ds, err := sink.Deliveries()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, d := range ds {
			seen[d.ID] = true
		}
		return seen[want[0]] && seen[want[1]]
	})
	time.Sleep(2 * time.Second) // a duplicate or a third transition would show by now; nothing to wait on
	if r := row(survivor); r.Seq != 2 || !r.Active || !r.Shelved {
		t.Fatalf("on the survivor %+v, want still Hi, shelved, seq 2", r)
	}
	ds, err := sink.Deliveries()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, d := range ds {
		ids[d.ID] = true
	}
	if len(ids) != 2 {
		t.Fatalf("sink ids %v, want exactly %v", ids, want)
	}
}
