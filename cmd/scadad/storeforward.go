package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/scadad/scadad/control"
	"github.com/scadad/scadad/internal/netguard"
	"github.com/scadad/scadad/siteconfig"
	"github.com/scadad/scadad/storeforward"
	"github.com/scadad/scadad/storeforward/mqtttarget"
	"github.com/scadad/scadad/storeforward/pgtarget"
	"github.com/scadad/scadad/storeforward/sparkplug"
)

// sfService is the store-and-forward parts: the control API's side
// (control.SFService), and the enqueuer and metrics the tag history and
// alarms share.
type sfService struct {
	*control.SFService
	enqueuer *storeforward.Enqueuer
	metrics  *storeforward.Metrics
}

// sfRemoveDelay gathers delivered ids for 20 ms before removing them: at
// thousands of deliveries a second, one removal entry per 20 ms instead of
// one per commit round trip (a few ms) leaves the CPU to delivery.
const sfRemoveDelay = 20 * time.Millisecond

// startStoreForward builds the enqueuer and the deliverer, follows the
// site config's targets, and runs delivery (which itself follows the role).
func (d *daemon) startStoreForward(bodies *netguard.BodyBudget) (*sfService, fasthttp.RequestHandler, error) {
	cfg, state, fwd := d.cfg, d.state, d.fwd
	metrics, err := storeforward.NewMetrics(d.reg, state)
	if err != nil {
		return nil, nil, fmt.Errorf("store-and-forward metrics: %w", err)
	}
	sfLog := d.log.With().Str("part", "storeforward").Logger()
	deliverer, err := storeforward.NewDeliverer(storeforward.DelivererOptions{
		Reader: state, Proposer: fwd, Roles: d.acting, Actor: cfg.NodeID, Logger: sfLog, Metrics: metrics,
		RemoveDelay: sfRemoveDelay,
		Kinds:       map[string]storeforward.Kind{pgtarget.Name: pgtarget.Kind{}, mqtttarget.Name: mqtttarget.Kind{}, sparkplug.Name: sparkplug.Kind{Births: storeforward.Births{Proposer: fwd, Actor: cfg.NodeID}}},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store-and-forward delivery: %w", err)
	}
	enq, err := storeforward.NewEnqueuer(storeforward.EnqueuerOptions{
		Proposer: fwd, Targets: deliverer, Counts: state, Actor: cfg.NodeID,
		MaxBatchMessages: cfg.SF.BatchMaxMessages, MaxDelay: cfg.SF.BatchDelay.D(), MaxInFlight: cfg.SF.BatchMaxInFlight,
		Logger: sfLog, Metrics: metrics, Bodies: bodies,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store-and-forward enqueue: %w", err)
	}
	d.run("storeforward-delivery", deliverer.Run)
	d.run("storeforward-targets", func(ctx context.Context) error {
		followSite(ctx, d.holder, func(u siteconfig.Update) {
			if err := deliverer.SetTargets(sfTargets(u.Site)); err != nil {
				sfLog.Error().Err(err).Uint64("revision", uint64(u.Revision)).Msg("store-and-forward targets of the new site config refused; keeping the previous ones")
			}
		})
		return nil
	})
	d.run("storeforward-enqueuer", func(ctx context.Context) error {
		<-ctx.Done()
		enq.Close()
		return nil
	})
	// Retry and discard through the Standby show in its `sf list` at once.
	seen := control.SeenLocally{Proposer: fwd, Applied: state}
	op, err := storeforward.NewOperator(storeforward.OperatorOptions{Reader: state, Proposer: seen, Targets: deliverer, Live: deliverer, Actor: "operator@" + cfg.NodeID})
	if err != nil {
		return nil, nil, fmt.Errorf("store-and-forward operator: %w", err)
	}
	return &sfService{SFService: &control.SFService{Enqueuer: enq, Deliverer: deliverer, Operator: op}, enqueuer: enq, metrics: metrics}, enq.Handler(), nil
}

func sfTargets(s *siteconfig.Site) []storeforward.Target {
	var out []storeforward.Target
	for _, t := range s.Targets {
		st := storeforward.Target{
			Name: t.Name, URL: t.URL, Headers: t.Headers, Timeout: t.Timeout,
			BackoffFloor: t.BackoffFloor, BackoffMax: t.BackoffMax,
			MaxAttempts: t.MaxAttempts, MaxPayloadBytes: t.MaxPayloadBytes, MaxInFlight: t.MaxInFlight,
			CAFile: t.CAFile, MaxPending: t.MaxPending, ParkOn: t.ParkOn,
			BatchMaxMessages: t.BatchMaxMessages, BatchMaxBytes: t.BatchMaxBytes, BatchFormat: t.BatchFormat,
		}
		if t.Kind == siteconfig.TargetPostgres && t.Postgres != nil {
			st.Kind = pgtarget.Name
			st.Settings = pgtarget.Settings{DSN: t.Postgres.DSN, PasswordFile: t.Postgres.PasswordFile, Table: t.Postgres.Table}
		}
		if m := t.MQTT; t.Kind == siteconfig.TargetMQTT && m != nil {
			st.Kind = mqtttarget.Name
			conn := mqtttarget.Settings{Broker: m.Broker, Topic: m.Topic, Username: m.Username, PasswordFile: m.PasswordFile,
				CAFile: m.CAFile, CertFile: m.CertFile, KeyFile: m.KeyFile, SessionExpiry: m.SessionExpiry, InFlight: m.InFlight, Protocol: m.Protocol}
			st.Settings = conn
			if sp := m.Sparkplug; sp != nil {
				st.Kind = sparkplug.Name
				st.Settings = sparkplug.Settings{Connection: conn, GroupID: sp.GroupID, EdgeNode: sp.EdgeNode, PrimaryHost: sp.PrimaryHost,
					Devices: sparkplugDevices(s, t.Name)}
			}
		}
		out = append(out, st)
	}
	return out
}

// sparkplugDevices are the devices (instances, by name) and metrics
// (attributes, in the instance's order) that the rules of format sparkplug
// send to target: every DBIRTH declares them, with the same aliases on
// every node.
func sparkplugDevices(s *siteconfig.Site, target string) []sparkplug.Device {
	selected := map[string]map[string]bool{} // instance → attributes; nil: all
	for _, r := range s.History {
		if r.Target != target || r.Format != siteconfig.HistorySparkplug {
			continue
		}
		for _, sel := range r.Select {
			attrs, seen := selected[sel.Instance]
			switch {
			case len(sel.Attributes) == 0:
				selected[sel.Instance] = nil
			case !seen || attrs != nil:
				if attrs == nil {
					attrs = map[string]bool{}
					selected[sel.Instance] = attrs
				}
				for _, a := range sel.Attributes {
					attrs[a] = true
				}
			}
		}
	}
	var out []sparkplug.Device
	for _, in := range s.Instances {
		attrs, ok := selected[in.Name]
		if !ok {
			continue
		}
		d := sparkplug.Device{Name: in.Name}
		for _, a := range in.Attributes {
			if attrs == nil || attrs[a.Name] {
				d.Metrics = append(d.Metrics, sparkplug.Metric{Name: a.Name, Type: storeforward.SparkplugDataTypeOf(string(a.Type))})
			}
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b sparkplug.Device) int { return strings.Compare(a.Name, b.Name) })
	return out
}
