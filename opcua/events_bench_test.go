package opcua

import (
	"fmt"
	"testing"
	"time"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/internal/uaevents"
)

// BenchmarkConditionRefresh10000 times a ConditionRefresh of 10,000
// retained conditions, from the Call to the RefreshEndEvent at a gopcua
// client subscribed to the Server object's events (all 10,002 events
// received, over loopback; the client publishes every 50 ms).
//
//	go test ./opcua -run '^$' -bench ConditionRefresh10000 -benchtime 3x
func BenchmarkConditionRefresh10000(b *testing.B) {
	const n = 10000
	ts := startServer(b, activeState(), nil)
	conds := make([]Condition, n)
	for i := range conds {
		conds[i] = Condition{ID: fmt.Sprintf("A%05d", i), Source: "Pump1", Name: "HiLevel", Message: fmt.Sprintf("level high %d", i),
			Severity: uint16(1 + i%1000), Active: true, Seq: 1, Time: time.Now()}
	}
	ts.SetConditions(conds)
	c := connect(b, ts.Endpoint())
	es := uaevents.Subscribe(b, c, ua.NewNumericNodeID(0, id.Server), &ua.EventFilter{SelectClauses: alarmSelect})
	var worst time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if res := uaevents.Call(b, c, conditionTypeID, refreshID, es.SubscriptionID); res.StatusCode != ua.StatusOK {
			b.Fatalf("ConditionRefresh: %v", res.StatusCode)
		}
		got := 0
		for {
			e := next(b, es)
			if e[fEventType].Value().(*ua.NodeID).IntID() == id.RefreshEndEventType {
				break
			}
			got++
		}
		if got != n+1 { // the RefreshStartEvent and every condition
			b.Fatalf("%d events before RefreshEnd, want %d", got, n+1)
		}
		worst = max(worst, time.Since(start))
	}
	b.ReportMetric(float64(worst.Milliseconds()), "worst-ms")
}
