package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/gateway"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/siteconfig"
	"github.com/scadad/scadad/storeforward"
	"github.com/scadad/scadad/subscribe"
)

// tagFanout hands every value from the subscribe workers to the parts that
// consume values: the OPC UA address space (set once it starts) and, on the
// Active node only, the history forwarder (a hot Standby reads values but
// must not forward them a second time).
type tagFanout struct {
	roles role.Source

	mu      sync.RWMutex
	opcua   func(instance, attribute string, v any, good bool, ts time.Time)
	history *storeforward.HistoryForwarder
}

func (f *tagFanout) TagUpdate(instance, attribute string, v subscribe.Value, q subscribe.Quality, ts time.Time) {
	f.mu.RLock()
	opcua, history := f.opcua, f.history
	f.mu.RUnlock()
	if opcua != nil {
		opcua(instance, attribute, v, q.IsGood(), ts)
	}
	if history != nil && f.roles.Current().Role == role.Active {
		history.Offer(storeforward.TagUpdate{Instance: instance, Attribute: attribute, Value: v, Quality: q.String(), Timestamp: ts})
	}
}

func (f *tagFanout) setOPCUA(fn func(instance, attribute string, v any, good bool, ts time.Time)) {
	f.mu.Lock()
	f.opcua = fn
	f.mu.Unlock()
}

func (f *tagFanout) setHistory(h *storeforward.HistoryForwarder) {
	f.mu.Lock()
	f.history = h
	f.mu.Unlock()
}

// startTagWorkers runs the subscribe manager and the history forwarder and
// keeps both on the deployed site config.
func startTagWorkers(log zerolog.Logger, reg prometheus.Registerer, roles role.Source, holder *siteconfig.Holder, enq storeforward.MessageEnqueuer, metrics *storeforward.Metrics, goRun func(string, func(context.Context) error)) (*subscribe.Manager, *tagFanout, error) {
	fan := &tagFanout{roles: roles}
	subLog := log.With().Str("part", "subscribe").Logger()
	mgr, err := subscribe.NewManager(subscribe.Options{
		Role: roles, Sink: fan, Registerer: reg, Logger: subLog,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("subscribe workers: %w", err)
	}
	goRun("subscribe", mgr.Run)
	goRun("site-config-workers", func(ctx context.Context) error {
		var cancelHistory context.CancelFunc
		defer func() {
			if cancelHistory != nil {
				cancelHistory()
			}
		}()
		followSite(ctx, holder, func(u siteconfig.Update) {
			if err := mgr.Apply(subscribeConfig(u.Site, subLog)); err != nil {
				subLog.Error().Err(err).Uint64("revision", uint64(u.Revision)).Msg("subscribe config of the new site config refused; keeping the previous one")
			}
			if !historyChanged(u.Changes) && cancelHistory != nil {
				return
			}
			if cancelHistory != nil {
				cancelHistory()
			}
			h, err := storeforward.NewHistoryForwarder(storeforward.HistoryOptions{
				Enqueuer: enq, Rules: historyRules(u.Site), Logger: log.With().Str("part", "history").Logger(),
				Active:  func() bool { return roles.Current().Role == role.Active },
				Metrics: metrics,
			})
			if err != nil {
				log.Error().Err(err).Msg("history forwarding rules refused")
				fan.setHistory(nil)
				return
			}
			hctx, cancel := context.WithCancel(ctx)
			cancelHistory = cancel
			go h.Run(hctx)
			fan.setHistory(h)
		})
		return nil
	})
	return mgr, fan, nil
}

func historyChanged(c siteconfig.Changes) bool { return len(c.History) > 0 }

// followSite hands every deployed site config (the current one first) to
// apply until ctx ends.
func followSite(ctx context.Context, holder *siteconfig.Holder, apply func(siteconfig.Update)) {
	updates, stop := holder.Watch()
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-updates:
			apply(u)
		}
	}
}

// subscribeConfig maps the site's MxAccess subscriptions onto the workers'
// plain config. Subscribe workers speak to MxAccess gateways; attributes on
// OPC UA client connections are not subscribed by this version (logged).
func subscribeConfig(s *siteconfig.Site, log zerolog.Logger) subscribe.Config {
	out := subscribe.Config{HotStandby: s.HotStandby}
	kinds := map[string]siteconfig.ConnectionKind{}
	for _, c := range s.Connections {
		kinds[c.Name] = c.Kind
		if c.Kind != siteconfig.KindMxAccess || c.MxAccess == nil {
			continue
		}
		out.Connections = append(out.Connections, subscribe.ConnectionConfig{
			Name: c.Name, Endpoint: c.MxAccess.Endpoint,
			Options: subscribe.ConnectionOptions{CommandTimeout: c.MxAccess.CommandTimeout, WriteUserID: int32(c.MxAccess.WriteUserID)},
		})
	}
	// An instance whose attributes sit on several gateway connections
	// comes once per connection: a worker each.
	for _, sub := range s.Subscriptions() {
		if kinds[sub.Connection] != siteconfig.KindMxAccess {
			log.Warn().Str("instance", sub.Instance).Str("connection", sub.Connection).Msg("attributes on an OPC UA client connection are not subscribed by this version")
			continue
		}
		in := subscribe.InstanceConfig{Name: sub.Instance, Connection: sub.Connection}
		for _, a := range sub.Attributes {
			in.Attributes = append(in.Attributes, subscribe.Attribute{Name: a.Name, Tag: a.Tag})
		}
		out.Instances = append(out.Instances, in)
	}
	return out
}

func historyRules(s *siteconfig.Site) []storeforward.HistoryRule {
	var out []storeforward.HistoryRule
	for _, r := range s.History {
		hr := storeforward.HistoryRule{Name: r.Name, Target: r.Target, Deadband: r.Deadband, MaxBatch: r.MaxBatch, MaxBatchDelay: r.MaxBatchDelay}
		if r.Mode == siteconfig.HistorySample {
			hr.SampleInterval = r.SampleInterval
		}
		for _, sel := range r.Select {
			hr.Select = append(hr.Select, storeforward.HistorySelector{Instance: sel.Instance, Attributes: sel.Attributes})
		}
		out = append(out, hr)
	}
	return out
}

// gatewayWriter routes an allowed device write to the gateway connection
// that carries the attribute, stamped with the writer's fencing epoch.
type gatewayWriter struct{ mgr *subscribe.Manager }

func (w gatewayWriter) Write(ctx context.Context, instance, attribute string, value any, epoch role.Epoch) error {
	tw, tag, err := w.mgr.Route(instance, attribute)
	if err != nil {
		return err
	}
	return tw.Write(gateway.WithEpoch(ctx, epoch), tag, value)
}
