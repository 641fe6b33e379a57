package subscribe

import (
	"fmt"
	"testing"
	"time"

	"github.com/scadad/scadad/gateway/sim"
	"github.com/scadad/scadad/role"
)

// BenchmarkAlarmStormWedge60s is the storm on the alarm path at
// the seeds' defaults (floor 5 s, max 60 s, ceiling 45 s): the gateway
// wedges for 60 s while 20 alarm sources subscribe. It reports the most
// subscribes in flight for one source, the subscribes each source sent,
// and how long after the wedge every source was subscribed. One run takes
// over a minute:
//
//	go test ./subscribe -run '^$' -bench AlarmStormWedge60s -benchtime 1x
func BenchmarkAlarmStormWedge60s(b *testing.B) {
	for range b.N {
		s := sim.New(sim.Config{})
		addr, err := s.Start("127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		for i := range 20 {
			if err := s.RaiseAlarm(sim.AlarmSpec{ID: fmt.Sprintf("A%02d", i), Source: fmt.Sprintf("S%02d", i), Severity: 500, Condition: "Hi"}); err != nil {
				b.Fatal(err)
			}
		}
		wedge := 60 * time.Second
		s.Wedge(wedge)
		wedgeEnds := time.Now().Add(wedge)
		cfg := Config{Connections: []ConnectionConfig{{Name: "mx1", Endpoint: addr, Options: ConnectionOptions{ProbeInterval: -1}}}}
		for i := range 20 {
			cfg.AlarmSources = append(cfg.AlarmSources, AlarmSourceConfig{Connection: "mx1", Source: fmt.Sprintf("S%02d", i)})
		}
		sink := newAlarmSinkRec()
		m := runManager(b, Options{Role: role.NewBroadcaster(role.State{Role: role.Active}), Sink: newMemSink(), Alarms: sink,
			Policy: RetryPolicy{Floor: 5 * time.Second, Max: 60 * time.Second, InFlightCeiling: 45 * time.Second}}, cfg)
		var done time.Time
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			n := 0
			for _, w := range m.Status() {
				if w.Confirmed {
					n++
				}
			}
			if n == 20 {
				done = time.Now()
				break
			}
		}
		if done.IsZero() {
			b.Fatal("not every source subscribed within 3 minutes")
		}
		st := s.Stats()
		var most int64
		for _, n := range st.Alarms.Subscribes {
			most = max(most, n)
		}
		b.ReportMetric(float64(st.Alarms.PeakInFlightPerSource), "peak-in-flight/source")
		b.ReportMetric(float64(most), "max-subscribes/source")
		b.ReportMetric(done.Sub(wedgeEnds).Seconds(), "s-after-wedge")
		s.Stop()
	}
}
