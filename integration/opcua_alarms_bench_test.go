package integration

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// benchCount reads a positive count from env; the benchmark is skipped
// without it.
func benchCount(t *testing.T, env string) int {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		t.Skipf("a benchmark: set %s to run it", env)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: not a positive count", env, v)
	}
	return n
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

// alarmPair is a witness pair serving OPC UA with the simulator's Pump1
// alarms deployed, one alarm (W0, "warm-up", condition Warm) raised and
// in the replicated state (the alarm worker is subscribed), and the
// OPC UA levels settled.
func alarmPair(t *testing.T) (*testcluster.Sim, *testcluster.Cluster, *testcluster.Node, *testcluster.Node) {
	t.Helper()
	sim, c, active, standby := opcuaPair(t)
	site := testcluster.SiteConfigGateway("ua-alarms", sim.Addr, nil, 0)
	site = append(site, `alarms:
  sources:
    - {connection: gw, source: Pump1}
`...)
	deploySite(t, c, site)
	simAlarm(t, sim, "raise", url.Values{"id": {"W0"}, "source": {"Pump1"}, "severity": {"100"}, "condition": {"Warm"}, "message": {"warm-up"}})
	testwait.For(t, 30*time.Second, "the first alarm in the replicated state", func() bool { return listAlarms(t, c, active)["W0"].Active })
	waitRedundancyLevels(t, active, standby, " after the deploy")
	return sim, c, active, standby
}

// TestOPCUAAlarmEventLatencyBench: gateway alarm transition (the
// simulator's admin call) -> the OPC UA event at a gopcua client
// subscribed to the Active's Server object, for
// SCADAD_BENCH_ALARM_EVENTS transitions (raise and clear of 100 alarms in
// turn) paced at SCADAD_BENCH_ALARM_RATE a second (default 100).
//
//	SCADAD_BENCH_ALARM_EVENTS=10000 go test ./integration/ -run TestOPCUAAlarmEventLatencyBench -v -timeout 30m
func TestOPCUAAlarmEventLatencyBench(t *testing.T) {
	n := benchCount(t, "SCADAD_BENCH_ALARM_EVENTS")
	rate := 100
	if v := os.Getenv("SCADAD_BENCH_ALARM_RATE"); v != "" {
		var err error
		if rate, err = strconv.Atoi(v); err != nil || rate <= 0 {
			t.Fatalf("SCADAD_BENCH_ALARM_RATE=%q: not a positive rate", v)
		}
	}
	const alarms = 100
	sim, _, active, _ := alarmPair(t)
	// gopcua's client forgets a Publish request after its request
	// timeout (3 s in the tests, and its publish timeout with it) and
	// drops an answer that comes later; a loaded host can stall that long.
	client := uaClient(t, active.OPCUA, gopcua.RequestTimeout(30*time.Second))
	events := uaEvents(t, client)

	// Transition i is round i/alarms of alarm i%alarms: a raise in even
	// rounds, a clear in odd ones; its EventId is the alarm and its
	// transition sequence, round+1.
	var mu sync.Mutex
	sent := make(map[string]time.Time, n)
	key := func(alarm string, seq int) string { return alarm + "\x00" + strconv.Itoa(seq) }
	go func() {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := range n {
			<-tick.C
			alarm, round := fmt.Sprintf("B%03d", i%alarms), i/alarms
			mu.Lock()
			sent[key(alarm, round+1)] = time.Now()
			mu.Unlock()
			if round%2 == 0 {
				simAlarm(t, sim, "raise", url.Values{"id": {alarm}, "source": {"Pump1"}, "severity": {"500"}, "condition": {"Bench"}, "message": {"bench " + alarm}})
			} else {
				simAlarm(t, sim, "clear", url.Values{"id": {alarm}})
			}
		}
	}()
	var lat []time.Duration
	seen := map[string]bool{}
	var others []string
	deadline := time.After(time.Duration(n/rate)*time.Second + 2*time.Minute)
	for len(lat) < n {
		select {
		case e := <-events.Events:
			mu.Lock()
			at, ok := sent[eventText(e, evID)]
			mu.Unlock()
			if ok && !seen[eventText(e, evID)] {
				seen[eventText(e, evID)] = true
				lat = append(lat, e.At.Sub(at))
			} else if len(others) < 20 {
				others = append(others, fmt.Sprintf("%q active=%v", eventText(e, evID), e.Fields[evActive].Value()))
			}
		case <-deadline:
			mu.Lock()
			var missing []string
			for k := range sent {
				if !seen[k] && len(missing) < 20 {
					missing = append(missing, fmt.Sprintf("%q", k))
				}
			}
			mu.Unlock()
			t.Fatalf("%d of %d transitions reached the client; missing %v; other events %v; the Active's publish send failures %s, events dropped %s", len(lat), n, missing, others,
				metricLine(active, "scadad_opcua_publish_send_failures_total"), metricLine(active, "scadad_opcua_events_dropped_total"))
		}
	}
	slices.Sort(lat)
	t.Logf("gateway alarm -> OPC UA event, %d transitions at %d/s: p50 %v, p99 %v, max %v",
		n, rate, percentile(lat, 0.50), percentile(lat, 0.99), lat[len(lat)-1])
}

// TestOPCUAAlarmFailoverBench: SIGKILL of the Active with 50 active
// alarms; from the kill, the survivor's OPC UA server is asked in turn
// for a write (Pump1.SpeedSP) and for an Acknowledge of an alarm (with
// the EventId its client had), every 5 ms, by two clients connected
// before the kill. The write-failover time is the first Good write, the
// alarm failover the first Good Acknowledge; then a ConditionRefresh must
// replay all 50. SCADAD_BENCH_ALARM_FAILOVERS trials, each on a new
// cluster.
//
//	SCADAD_BENCH_ALARM_FAILOVERS=10 go test ./integration/ -run TestOPCUAAlarmFailoverBench -v -timeout 30m
func TestOPCUAAlarmFailoverBench(t *testing.T) {
	trials := benchCount(t, "SCADAD_BENCH_ALARM_FAILOVERS")
	var writes, acks []time.Duration
	for trial := 1; trial <= trials; trial++ {
		t.Run(fmt.Sprintf("trial%d", trial), func(t *testing.T) {
			w, a := alarmFailoverTrial(t)
			t.Logf("trial %d: write %v, acknowledge %v", trial, w, a)
			writes, acks = append(writes, w), append(acks, a)
		})
	}
	slices.Sort(writes)
	slices.Sort(acks)
	t.Logf("%d trials: write failover median %v (%v); alarm acknowledge median %v (%v)", len(writes),
		percentile(writes, 0.5), writes, percentile(acks, 0.5), acks)
}

func alarmFailoverTrial(t *testing.T) (write, ack time.Duration) {
	sim, c, active, standby := alarmPair(t)
	const alarms = 50
	for i := range alarms {
		simAlarm(t, sim, "raise", url.Values{"id": {fmt.Sprintf("F%02d", i)}, "source": {"Pump1"}, "severity": {"700"}, "condition": {"Bench"}, "message": {"failover bench"}})
	}
	writer, acker := uaClient(t, standby.OPCUA), uaClient(t, standby.OPCUA)
	cond := siteNode(t, acker, "alarm:F00")
	eventIDNode := ua.NewStringNodeID(cond.Namespace(), "alarm:F00|EventId")
	speed := siteNode(t, writer, "Pump1.SpeedSP")
	var eventID []byte
	testwait.For(t, 30*time.Second, "all 50 alarms (and W0) in the Standby's replicated state", func() bool {
		return listAlarmsActive(t, c, standby) == alarms+1
	})
	dv, err := readValue(acker, eventIDNode)
	if err != nil || dv.Status != ua.StatusOK {
		t.Fatalf("F00's EventId: %v %v", err, dv)
	}
	eventID = dv.Value.Value().([]byte)
	comment := &ua.LocalizedText{Text: "failover bench", EncodingMask: ua.LocalizedTextText}
	ackMethod := ua.NewNumericNodeID(0, id.AcknowledgeableConditionType_Acknowledge)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first := func(try func() bool) <-chan time.Time {
		out := make(chan time.Time, 1)
		go func() {
			for ctx.Err() == nil {
				if try() {
					out <- time.Now()
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		return out
	}
	killed := time.Now()
	c.Kill(active)
	wrote := first(func() bool {
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		defer wcancel()
		resp, err := writer.Write(wctx, &ua.WriteRequest{NodesToWrite: []*ua.WriteValue{{NodeID: speed, AttributeID: ua.AttributeIDValue,
			Value: &ua.DataValue{EncodingMask: ua.DataValueValue, Value: ua.MustVariant(42.0)}}}})
		return err == nil && resp.Results[0] == ua.StatusOK
	})
	acked := first(func() bool {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		defer acancel()
		res, err := acker.Call(actx, &ua.CallMethodRequest{ObjectID: cond, MethodID: ackMethod, InputArguments: []*ua.Variant{ua.MustVariant(eventID), ua.MustVariant(comment)}})
		if err == nil && res.StatusCode == ua.StatusBadEventIDUnknown {
			if dv, err := readValue(acker, eventIDNode); err == nil && dv.Status == ua.StatusOK {
				eventID = dv.Value.Value().([]byte) // the new Active's refresh made a transition
			}
		}
		return err == nil && res.StatusCode == ua.StatusOK
	})
	for _, ch := range []struct {
		what string
		c    <-chan time.Time
		out  *time.Duration
	}{{"write", wrote, &write}, {"acknowledge", acked, &ack}} {
		select {
		case at := <-ch.c:
			*ch.out = at.Sub(killed)
		case <-ctx.Done():
			t.Fatalf("no Good %s on the survivor within 60 s of the kill", ch.what)
		}
	}
	// The survivor's state is whole: a refresh replays all 50.
	events := uaEvents(t, acker)
	if got := uaCall(t, acker, ua.NewNumericNodeID(0, id.ConditionType), ua.NewNumericNodeID(0, id.ConditionType_ConditionRefresh), events.SubscriptionID); got != ua.StatusOK {
		t.Fatalf("ConditionRefresh on the survivor: %v", got)
	}
	replayed := 0
	for {
		e := events.Next(t, eventWait, "the refresh's events", nil)
		switch e.Fields[evType].Value().(*ua.NodeID).IntID() {
		case id.RefreshEndEventType:
			if replayed != alarms+1 {
				t.Fatalf("the survivor's refresh replayed %d conditions, want %d", replayed, alarms+1)
			}
			return write, ack
		case id.OffNormalAlarmType:
			replayed++
		}
	}
}

// listAlarmsActive counts the active alarms n's replicated state shows.
func listAlarmsActive(t *testing.T, c *testcluster.Cluster, n *testcluster.Node) int {
	t.Helper()
	count := 0
	for _, r := range listAlarms(t, c, n) {
		if r.Active {
			count++
		}
	}
	return count
}
