package alarms

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/field"
	"github.com/scadad/scadad/gateway/sim"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/subscribe"
)

// BenchmarkGatewayAlarmToReplicatedState measures a gateway transition
// (the simulator raising or clearing an alarm) until the Active's
// replicated state has it: the stream, the subscribe connection, the alarm
// service and an FSM apply (a sole node: no network round trip to a
// follower). It reports p50 and p99 over 2,000 transitions per run.
//
//	go test ./alarms -run '^$' -bench GatewayAlarmToReplicatedState -benchtime 1x
func BenchmarkGatewayAlarmToReplicatedState(b *testing.B) {
	for range b.N {
		s := sim.New(sim.Config{})
		addr, err := s.Start("127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		f := newFSMB(b)
		r := &localRaft{f: f}
		roles := role.NewBroadcaster(role.State{Role: role.Active, Voters: 1})
		svc, err := New(Options{Proposer: r, State: f, Roles: roles, NodeID: "bench", Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = svc.Run(ctx) }()
		mgr, err := subscribe.NewManager(subscribe.Options{Role: roles, Sink: subscribe.SinkFunc(func(string, string, field.Value, field.Quality, time.Time) {}),
			Alarms: svc, Registerer: prometheus.NewRegistry(), Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		if err := mgr.Apply(subscribe.Config{Connections: []subscribe.ConnectionConfig{{Name: "mx1", Endpoint: addr, Options: subscribe.ConnectionOptions{ProbeInterval: -1}}},
			AlarmSources: []subscribe.AlarmSourceConfig{{Connection: "mx1", Source: "Z"}}}); err != nil {
			b.Fatal(err)
		}
		go func() { _ = mgr.Run(ctx) }()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if st := mgr.Status(); len(st) == 1 && st[0].Confirmed {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("alarm source not subscribed")
			}
		}
		const n = 2000
		lat := make([]time.Duration, 0, n)
		for i := range n {
			id := fmt.Sprintf("A%03d", i%100)
			t0 := time.Now()
			if (i/100)%2 == 0 {
				err = s.RaiseAlarm(sim.AlarmSpec{ID: id, Source: "Z", Severity: 700, Condition: "Hi"})
			} else {
				err = s.ClearAlarm(id)
			}
			if err != nil {
				b.Fatal(err)
			}
			want := uint64(i/100 + 1)
			for {
				rec, ok, _ := f.Alarm(id)
				if ok && rec.GatewaySeq >= want {
					break
				}
				if time.Since(t0) > 10*time.Second {
					b.Fatalf("transition %d of %s not recorded in 10 s", want, id)
				}
				time.Sleep(50 * time.Microsecond)
			}
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[n/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[n*99/100].Microseconds())/1000, "p99-ms")
		cancel()
		s.Stop()
	}
}
