package main

import (
	"context"
	"fmt"
	"sort"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/alarms"
	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/field"
	"github.com/scadad/scadad/gateway"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/siteconfig"
	"github.com/scadad/scadad/storeforward"
	"github.com/scadad/scadad/subscribe"
	"github.com/scadad/scadad/uaclient"
	"github.com/scadad/scadad/uasec"
)

// startTagWorkers runs the gateway subscribe workers, the OPC UA client
// sessions and the history forwarder and keeps them on the deployed site
// config. The writer it returns routes device writes to whichever of them
// carries the attribute.
func (d *daemon) startTagWorkers(enq storeforward.MessageEnqueuer, metrics *storeforward.Metrics, alarmSvc *alarms.Service) (deviceWriter, *field.Fanout, *dataConnections, error) {
	log, reg, roles, holder := d.log, d.reg, d.acting, d.holder
	fan := field.NewFanout(roles, alarmSvc.TagUpdate)
	subLog := log.With().Str("part", "subscribe").Logger()
	mgr, err := subscribe.NewManager(subscribe.Options{
		Role: roles, Sink: fan, Alarms: alarmSvc, Registerer: reg, Logger: subLog,
	})
	if err != nil {
		return deviceWriter{}, nil, nil, fmt.Errorf("subscribe workers: %w", err)
	}
	alarmSvc.SetAcknowledger(mgr)
	uaLog := log.With().Str("part", "opcua-client").Logger()
	uam, err := uaclient.NewManager(uaclient.Options{Role: roles, Sink: fan, Logger: uaLog, Registerer: reg})
	if err != nil {
		return deviceWriter{}, nil, nil, fmt.Errorf("opc ua client sessions: %w", err)
	}
	conns := &dataConnections{gateways: mgr, upstream: uam}
	d.run("history-on-active", fan.FollowRole)
	d.run("subscribe", mgr.Run)
	d.run("opcua-client", uam.Run)
	d.run("site-config-workers", func(ctx context.Context) error {
		var cancelHistory context.CancelFunc
		defer func() {
			if cancelHistory != nil {
				cancelHistory()
			}
		}()
		followSite(ctx, holder, func(u siteconfig.Update) {
			fan.SetHot(u.Site.HotStandby)
			if err := alarmSvc.SetConfig(alarmConfig(u.Site)); err != nil {
				log.Error().Err(err).Uint64("revision", uint64(u.Revision)).Msg("alarm config of the new site config refused; keeping the previous one")
			}
			if err := mgr.Apply(subscribeConfig(u.Site)); err != nil {
				subLog.Error().Err(err).Uint64("revision", uint64(u.Revision)).Msg("subscribe config of the new site config refused; keeping the previous one")
			}
			if err := uam.Apply(uaClientConfig(u.Site, uaLog)); err != nil {
				uaLog.Error().Err(err).Uint64("revision", uint64(u.Revision)).Msg("opc ua client config of the new site config refused; keeping the previous one")
			}
			if !historyChanged(u.Changes) && cancelHistory != nil {
				return
			}
			if cancelHistory != nil {
				cancelHistory()
			}
			h, err := storeforward.NewHistoryForwarder(storeforward.HistoryOptions{
				Enqueuer: enq, Rules: historyRules(u.Site), Logger: log.With().Str("part", "history").Logger(),
				Roles:   roles,
				Metrics: metrics,
			})
			if err != nil {
				log.Error().Err(err).Msg("history forwarding rules refused")
				fan.SetHistory(nil)
				return
			}
			hctx, cancel := context.WithCancel(ctx)
			cancelHistory = cancel
			go h.Run(hctx)
			fan.SetHistory(h)
		})
		return nil
	})
	return deviceWriter{gateways: mgr, upstream: uam}, fan, conns, nil
}

// dataConnections reports the field connections this node runs, for
// scadactl status.
type dataConnections struct {
	gateways *subscribe.Manager
	upstream *uaclient.Manager
}

// Status lists the gateway connections with running workers (up when
// every instance's subscription is confirmed) and the OPC UA client
// connections with a session, by kind and name.
func (d *dataConnections) Status() []*controlpb.DataConnectionStatus {
	type tally struct {
		endpoint           string
		workers, confirmed int
	}
	byConn := map[string]*tally{}
	var names []string
	for _, w := range d.gateways.Status() {
		t := byConn[w.Connection]
		if t == nil {
			t = &tally{endpoint: w.Endpoint}
			byConn[w.Connection] = t
			names = append(names, w.Connection)
		}
		t.workers++
		if w.Confirmed {
			t.confirmed++
		}
	}
	sort.Strings(names)
	var out []*controlpb.DataConnectionStatus
	for _, n := range names {
		t := byConn[n]
		out = append(out, &controlpb.DataConnectionStatus{
			Name: n, Kind: string(siteconfig.KindMxAccess), Endpoint: t.endpoint, Up: t.confirmed == t.workers,
			Detail: fmt.Sprintf("%d/%d instances subscribed", t.confirmed, t.workers),
		})
	}
	for _, c := range d.upstream.Status() {
		detail := fmt.Sprintf("%d attributes", c.Items)
		if c.LastError != "" {
			detail = c.LastError
		}
		out = append(out, &controlpb.DataConnectionStatus{Name: c.Name, Kind: string(siteconfig.KindOPCUA), Endpoint: c.Endpoint, Up: c.Connected, Detail: detail})
	}
	return out
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

// subscribeConfig maps the site's MxAccess subscriptions onto the gateway
// workers' plain config; attributes on OPC UA client connections are
// uaClientConfig's.
func subscribeConfig(s *siteconfig.Site) subscribe.Config {
	out := subscribe.Config{HotStandby: s.HotStandby}
	kinds := map[string]siteconfig.ConnectionKind{}
	for _, c := range s.Connections {
		kinds[c.Name] = c.Kind
		if c.Kind != siteconfig.KindMxAccess || c.MxAccess == nil {
			continue
		}
		out.Connections = append(out.Connections, subscribe.ConnectionConfig{
			Name: c.Name, Endpoint: c.MxAccess.Endpoint,
			Options: subscribe.ConnectionOptions{
				CommandTimeout: c.MxAccess.CommandTimeout, WriteUserID: int32(c.MxAccess.WriteUserID),
				Policy:          subscribe.RetryPolicy{Floor: c.MxAccess.BackoffFloor, Max: c.MxAccess.BackoffMax, InFlightCeiling: c.MxAccess.InFlightCeiling},
				LegacySubscribe: !c.MxAccess.BulkSupervisory(),
			},
		})
	}
	// An instance whose attributes sit on several gateway connections
	// comes once per connection: a worker each.
	for _, sub := range s.Subscriptions() {
		if kinds[sub.Connection] != siteconfig.KindMxAccess {
			continue
		}
		in := subscribe.InstanceConfig{Name: sub.Instance, Connection: sub.Connection}
		for _, a := range sub.Attributes {
			in.Attributes = append(in.Attributes, subscribe.Attribute{Name: a.Name, Tag: a.Tag})
		}
		out.Instances = append(out.Instances, in)
	}
	for _, a := range s.Alarms.Sources {
		if kinds[a.Connection] == siteconfig.KindMxAccess {
			out.AlarmSources = append(out.AlarmSources, subscribe.AlarmSourceConfig{Connection: a.Connection, Source: a.Source})
		}
	}
	return out
}

// alarmConfig maps the site's alarm section onto the alarm service's.
func alarmConfig(s *siteconfig.Site) alarms.Config {
	out := alarms.Config{HistoryTarget: s.Alarms.HistoryTarget}
	level := func(l *siteconfig.LimitLevel) *alarms.Threshold {
		if l == nil {
			return nil
		}
		return &alarms.Threshold{Limit: l.Limit, Severity: uint32(l.Severity)}
	}
	for _, l := range s.Alarms.Limits {
		out.Limits = append(out.Limits, alarms.Limit{ID: l.Name, Instance: l.Instance, Attribute: l.Attribute,
			HiHi: level(l.HiHi), Hi: level(l.Hi), Lo: level(l.Lo), LoLo: level(l.LoLo),
			Deadband: l.Deadband, OnDelay: l.OnDelay, Message: l.Message})
	}
	return out
}

// uaClientConfig maps the site's OPC UA client connections and the
// attributes on them (each tag a NodeId) onto the client sessions' config.
// A connection whose certificate, key or password file cannot be read is
// left out with an error in the log: its attributes then never turn Good.
func uaClientConfig(s *siteconfig.Site, log zerolog.Logger) uaclient.Config {
	out := uaclient.Config{HotStandby: s.HotStandby}
	items := map[string][]uaclient.Item{}
	for _, sub := range s.Subscriptions() {
		for _, a := range sub.Attributes {
			items[sub.Connection] = append(items[sub.Connection], uaclient.Item{Instance: sub.Instance, Attribute: a.Name, NodeID: a.Tag})
		}
	}
	for _, c := range s.Connections {
		u := c.OPCUA
		if c.Kind != siteconfig.KindOPCUA || u == nil || len(items[c.Name]) == 0 {
			continue
		}
		opts := uasec.ClientOptions{SecurityPolicy: u.SecurityPolicy, SecurityMode: u.SecurityMode, Timeout: u.RequestTimeout}
		var err error
		if u.CertificateFile != "" {
			opts.Certificate, opts.PrivateKey, err = uasec.LoadClientIdentity(u.CertificateFile, u.PrivateKeyFile)
		}
		if err == nil && u.ServerCertificateFile != "" {
			opts.ServerCertificates, err = uasec.ReadCertificateFile(u.ServerCertificateFile)
		}
		if err == nil && u.Identity.Type == siteconfig.IdentityUsername {
			opts.Username = u.Identity.Username
			opts.Password, err = uasec.ReadPasswordFile(u.Identity.PasswordFile)
		}
		if err != nil {
			log.Error().Err(err).Str("connection", c.Name).Msg("opc ua client connection left out; its attributes stay Bad")
			continue
		}
		out.Connections = append(out.Connections, uaclient.Connection{
			Name: c.Name, Endpoint: u.Endpoint, Client: opts,
			PublishingInterval: u.PublishingInterval, BackoffFloor: u.BackoffFloor, BackoffMax: u.BackoffMax,
			Items: items[c.Name],
		})
	}
	return out
}

func historyRules(s *siteconfig.Site) []storeforward.HistoryRule {
	var out []storeforward.HistoryRule
	for _, r := range s.History {
		hr := storeforward.HistoryRule{Name: r.Name, Target: r.Target, Deadband: r.Deadband, MaxBatch: r.MaxBatch, MaxBatchDelay: r.MaxBatchDelay, Format: string(r.Format)}
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

// deviceWriter routes an allowed device write to the connection that
// carries the attribute: an upstream OPC UA server, or a gateway (stamped
// with the writer's fencing epoch, which the gateway checks).
type deviceWriter struct {
	gateways *subscribe.Manager
	upstream *uaclient.Manager
}

func (w deviceWriter) Write(ctx context.Context, instance, attribute string, value any, epoch role.Epoch) error {
	if w.upstream.Carries(instance, attribute) {
		return w.upstream.Write(ctx, instance, attribute, value)
	}
	tw, tag, err := w.gateways.Route(instance, attribute)
	if err != nil {
		return err
	}
	return tw.Write(gateway.WithEpoch(ctx, epoch), tag, value)
}
