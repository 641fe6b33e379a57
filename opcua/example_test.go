package opcua_test

import (
	"context"
	"time"

	"github.com/gopcua/opcua/ua"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/opcua"
	"github.com/scadad/scadad/role"
)

type gatewayWriter struct{}

func (gatewayWriter) Write(ctx context.Context, instance, attribute string, value any, epoch role.Epoch) error {
	return nil // the daemon passes its gateway client here
}

// Example shows the daemon's wiring: role stream in, model and tag feed in,
// peer verdicts across.
func Example() {
	roles := role.NewBroadcaster(role.State{}) // raftnode publishes here
	srv, err := opcua.New(opcua.Config{
		Host: "node-a.lan", Port: 4840, ApplicationURI: "urn:site:node-a",
		AllowAnonymous: true,
		Peers:          []opcua.Peer{{ApplicationURI: "urn:site:node-b", EndpointURL: "opc.tcp://node-b.lan:4840"}},
	}, opcua.Deps{Logger: zerolog.Nop(), Registerer: prometheus.NewRegistry(), Roles: roles, Writer: gatewayWriter{}})
	if err != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		return
	}
	defer srv.Close()

	// On every deploy:
	srv.ApplyModel(opcua.Model{Instances: []opcua.Instance{{Name: "Pump1", Attributes: []opcua.Attribute{
		{Name: "Speed", Type: opcua.TypeDouble, Writable: true},
	}}}})
	// From the subscribe workers:
	srv.TagUpdate("Pump1", "Speed", 12.5, ua.StatusOK, time.Now())
	srv.SetDataFresh(true)

	// Probe the peer; ship each verdict over the peer link. The peer calls
	// SetPeerVerdict with what it receives about itself.
	prober := opcua.NewProber(opcua.ProberConfig{
		Endpoints: []string{"opc.tcp://node-b.lan:4840"},
		OnVerdict: func(v opcua.Verdict) { /* peerLink.Send(v) */ },
	})
	go prober.Run(ctx)
	// On receiving the peer's verdict about this node:
	srv.SetPeerVerdict(true, time.Now())
}
