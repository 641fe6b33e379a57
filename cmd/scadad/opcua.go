package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/activegate"
	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/control"
	"github.com/scadad/scadad/field"
	"github.com/scadad/scadad/internal/backoff"
	"github.com/scadad/scadad/internal/clock"
	"github.com/scadad/scadad/internal/netguard"
	"github.com/scadad/scadad/internal/version"
	"github.com/scadad/scadad/nodeconfig"
	"github.com/scadad/scadad/opcua"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/siteconfig"
)

// opcuaService runs this node's OPC UA server from the deployed site
// config, probes the peers' endpoints and learns from them whether they can
// reach this one.
type opcuaService struct {
	nodeID   string
	endpoint string
	peers    []nodeconfig.Member
	// cert and key are the configured application certificate (both
	// empty: OwnCertificate's, under pkiDir).
	cert, key string
	pkiDir    string
	limits    netguard.Limits // the OPC UA port's connection bounds
	log       zerolog.Logger
	reg       prometheus.Registerer
	roles     role.Source
	writer    opcua.Writer
	fan       *field.Fanout
	fwd       *control.Forwarder
	gate      *activegate.Counter
	access    *opcuaAccess
	// alarms takes the condition methods; feed hands each server the
	// replicated alarm state.
	alarms opcua.AlarmActions
	feed   *alarmFeed
	// jitter spreads the attempts to start a server that failed to.
	jitter func() float64

	mu     sync.Mutex
	srv    *opcua.Server
	prober *opcua.Prober
}

func applicationURI(nodeID string) string { return "urn:scadad:node:" + nodeID }

// startOPCUA starts the OPC UA parts on a node whose member entry names an
// OPC UA endpoint; it returns nil on a node that serves none.
func (d *daemon) startOPCUA(writer opcua.Writer, fan *field.Fanout, gate *activegate.Counter, alarmActions opcua.AlarmActions) *opcuaService {
	cfg, log, fwd := d.cfg, d.log, d.fwd
	self, _ := cfg.Self()
	if self.OPCUA == "" {
		return nil
	}
	s := &opcuaService{nodeID: cfg.NodeID, endpoint: self.OPCUA, log: log.With().Str("part", "opcua").Logger(), reg: d.reg, roles: d.acting, writer: writer, fan: fan, fwd: fwd, gate: gate,
		cert: cfg.OPCUA.Cert, key: cfg.OPCUA.Key, pkiDir: cfg.PKIDir(), limits: d.budgets.opcua, jitter: rand.Float64}
	var err error
	if s.access, err = newOPCUAAccess(cfg.NodeID, d.state, fwd, s.log, d.reg, clock.System()); err != nil {
		s.log.Error().Err(err).Msg("OPC UA rejection reports are not exported as metrics")
	}
	d.run("opcua-rejections", s.access.run)
	s.alarms = alarmActions
	s.feed = newAlarmFeed(d.state, s.log, s.server)
	d.run("opcua-alarms", s.feed.run)
	var endpoints []string
	for _, m := range cfg.Cluster.Members {
		if m.ID != cfg.NodeID && m.OPCUA != "" {
			s.peers = append(s.peers, m)
			endpoints = append(endpoints, m.OPCUA)
		}
	}
	if len(endpoints) > 0 {
		s.prober = opcua.NewProber(opcua.ProberConfig{Endpoints: endpoints, Logger: s.log})
		d.run("opcua-probe", func(ctx context.Context) error {
			s.prober.Run(ctx)
			return nil
		})
		d.run("opcua-peer-verdicts", s.learnPeerVerdicts)
	}
	d.run("opcua-server", func(ctx context.Context) error {
		defer s.close()
		s.follow(ctx, d.holder)
		return nil
	})
	return s
}

// opcuaStartRetryFloor and opcuaStartRetryMax space the attempts to start
// a server that failed to start.
const (
	opcuaStartRetryFloor = time.Second
	opcuaStartRetryMax   = 30 * time.Second
)

// follow applies each deploy. A server that failed to start (its port held
// by another process for a while, a host name that does not resolve yet at
// boot, or a site config it cannot serve) is started again from the newest
// site config, with backoff, until it starts or a newer deploy arrives: the
// node must not stay without an endpoint until someone deploys again.
func (s *opcuaService) follow(ctx context.Context, holder *siteconfig.Holder) {
	updates, stop := holder.Watch()
	defer stop()
	var (
		last     siteconfig.Update
		retry    *time.Timer
		again    <-chan time.Time
		failures int
	)
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case last = <-updates:
			failures = 0
		case <-again:
		}
		if retry != nil {
			retry.Stop()
			retry, again = nil, nil
		}
		if s.apply(ctx, last) {
			failures = 0
			continue
		}
		failures++
		wait := backoff.Delay(opcuaStartRetryFloor, opcuaStartRetryMax, failures, s.jitter())
		s.log.Info().Uint64("revision", uint64(last.Revision)).Int("attempt", failures).Stringer("next_attempt_in", wait).
			Msg("OPC UA server: trying to start it again")
		retry = time.NewTimer(wait)
		again = retry.C
	}
}

// apply follows a deploy: the address space changes by difference; a change
// of the server's own options (security, identities, namespace, hot
// standby) restarts the server. It reports false when the server did not
// start.
func (s *opcuaService) apply(ctx context.Context, u siteconfig.Update) bool {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	restart := srv == nil || len(u.Changes.OPCUA) > 0
	// The site's name and hot-standby flag are server options too.
	restart = restart || len(u.Changes.Site) > 0
	if restart {
		s.close()
		var err error
		srv, err = s.newServer(ctx, u.Site)
		if err != nil {
			s.log.Error().Err(err).Uint64("revision", uint64(u.Revision)).
				Msg("OPC UA server not started: the node serves no OPC UA endpoint until it starts (a port in use is retried; a site config it cannot serve needs a deploy that fixes its opcua section)")
			return false
		}
	}
	m := model(u.Site)
	// The site namespace's NamespaceVersion: the revision, the same on
	// every node of the cluster.
	m.Version = strconv.FormatUint(uint64(u.Revision), 10)
	diff, err := srv.ApplyModel(m)
	if err != nil {
		s.log.Error().Err(err).Uint64("revision", uint64(u.Revision)).Msg("OPC UA address space not updated; keeping the previous one")
		return true
	}
	s.log.Info().Uint64("revision", uint64(u.Revision)).Str("changes", fmt.Sprintf("%+v", diff)).Msg("OPC UA address space follows the deploy")
	// Values that came before the attributes did, or before this server
	// existed, and that the gateway will not send again until they change.
	s.fan.ReplayServer()
	return true
}

func (s *opcuaService) newServer(ctx context.Context, site *siteconfig.Site) (*opcua.Server, error) {
	host, port, err := nodeconfig.OPCUAHostPort(s.endpoint)
	if err != nil {
		return nil, err
	}
	c := opcua.Config{
		Host: host, Port: port,
		ApplicationURI: applicationURI(s.nodeID), ApplicationName: "scadad " + s.nodeID,
		NamespaceURI: site.OPCUA.NamespaceURI, SiteName: site.Name,
		AllowAnonymous: site.OPCUA.Identities.Anonymous, AnonymousCanWrite: site.OPCUA.Identities.AnonymousCanWrite,
		HotStandby: site.HotStandby, MaxSessions: site.OPCUA.MaxSessions,
		MaxConnections: s.limits.MaxConns, MaxConnectionsPerAddress: s.limits.MaxConnsPerAddr,
		CertFile: s.cert, KeyFile: s.key,
		// Trust and users come from the replicated state only: the
		// per-node trusted folder and password files were read in v0.1.0
		// only (warnRetiredTrustFolder, warnRetiredSiteFields).
		RejectedClientsDir: filepath.Join(s.pkiDir, "rejected"),
		Trust:              s.access, UserStore: s.access,
	}
	build := version.Get()
	c.Build = opcua.BuildInfo{SoftwareVersion: build.Version, BuildNumber: build.Revision, BuildDate: build.Time}
	if c.CertFile == "" {
		c.CertFile, c.KeyFile, err = opcua.OwnCertificate(s.pkiDir, c.ApplicationURI, host)
		if err != nil {
			return nil, err
		}
	}
	// Made up front so an operator finds where refused certificates go.
	if err := os.MkdirAll(c.RejectedClientsDir, 0o750); err != nil {
		return nil, fmt.Errorf("opcua rejected client certificate folder: %w", err)
	}
	for _, p := range site.OPCUA.Security {
		c.Security = append(c.Security, opcua.SecurityProfile{Policy: p.Policy, Mode: p.Mode})
	}
	warnRetiredTrustFolder(s.log, filepath.Join(s.pkiDir, "trusted"))
	warnRetiredSiteFields(s.log, site)
	for _, m := range s.peers {
		c.Peers = append(c.Peers, opcua.Peer{ApplicationURI: applicationURI(m.ID), EndpointURL: m.OPCUA})
	}
	srv, err := opcua.New(c, opcua.Deps{Logger: s.log, Registerer: s.reg, Roles: s.roles, Writer: s.writer, Gate: s.gate, Alarms: s.alarms})
	if err != nil {
		return nil, fmt.Errorf("opcua server: %w", err)
	}
	// Not ended by ctx: on shutdown ctx ends first, and a server stopped by
	// it could not publish ServiceLevel 0 to its clients in Close (the
	// deferred close); clients would learn of the stop from a dead
	// connection, seconds later. close stops it.
	if err := srv.Start(context.WithoutCancel(ctx)); err != nil {
		// Its metric names go back to the registry, or no later server
		// (the next attempt, the next deploy) could register them.
		srv.Close()
		return nil, fmt.Errorf("opcua server: %w", err)
	}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	s.fan.SetServer(srv.TagUpdate)
	s.feed.serverStarted()
	s.log.Info().Str("endpoint", srv.Endpoint()).Uint8("service_level", srv.ServiceLevel()).Msg("OPC UA server started")
	return srv, nil
}

// server is the OPC UA server now serving (nil: none).
func (s *opcuaService) server() *opcua.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv
}

func (s *opcuaService) close() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		s.fan.SetServer(nil)
		srv.Close()
	}
}

// learnPeerVerdicts asks each peer, over the control API, what its probe
// saw of this node's endpoint, and feeds that into the ServiceLevel.
func (s *opcuaService) learnPeerVerdicts(ctx context.Context) error {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		s.mu.Lock()
		srv := s.srv
		s.mu.Unlock()
		if srv == nil {
			continue
		}
		for _, m := range s.peers {
			cli, err := s.fwd.Client(m.ID)
			if err != nil {
				continue
			}
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cli.Status(qctx, &controlpb.StatusRequest{})
			cancel()
			if err != nil {
				// A peer that cannot be asked has no say: its last verdict
				// must not hold a survivor out of the healthy tiers.
				srv.ForgetPeerVerdict()
				continue
			}
			for _, v := range st.OpcuaVerdicts {
				if v.Endpoint == s.endpoint {
					srv.SetPeerVerdict(v.Reachable, time.Unix(0, v.AtUnixNano))
				}
			}
		}
	}
}

// status is what Status reports about OPC UA.
func (s *opcuaService) status() (uint32, []*controlpb.OPCUAVerdict) {
	if s == nil {
		return 0, nil
	}
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	var level uint32
	if srv != nil {
		level = uint32(srv.ServiceLevel())
	}
	var out []*controlpb.OPCUAVerdict
	if s.prober != nil {
		for _, m := range s.peers {
			if v, ok := s.prober.Latest(m.OPCUA); ok {
				out = append(out, &controlpb.OPCUAVerdict{Endpoint: v.Endpoint, Reachable: v.Reachable, ServiceLevel: uint32(v.ServiceLevel), AtUnixNano: v.At.UnixNano(), Error: v.Err})
			}
		}
	}
	return level, out
}

// euRange is an attribute's configured range for the address space.
func euRange(r *siteconfig.Range) *opcua.Range {
	if r == nil {
		return nil
	}
	return &opcua.Range{Low: r.Low, High: r.High}
}

// model maps the site's instances onto the OPC UA address space.
func model(site *siteconfig.Site) opcua.Model {
	var m opcua.Model
	for _, in := range site.Instances {
		mi := opcua.Instance{Name: in.Name}
		for _, a := range in.Attributes {
			mi.Attributes = append(mi.Attributes, opcua.Attribute{Name: a.Name, Type: opcuaType(a.Type), Writable: a.Writable,
				Description: a.Description, AllowNonFinite: a.AllowNonFinite, Units: a.Units, EURange: euRange(a.EURange)})
		}
		m.Instances = append(m.Instances, mi)
	}
	return m
}

func opcuaType(t siteconfig.DataType) opcua.DataType {
	switch t {
	case siteconfig.TypeBool:
		return opcua.TypeBoolean
	case siteconfig.TypeInt32:
		return opcua.TypeInt32
	case siteconfig.TypeInt64:
		return opcua.TypeInt64
	case siteconfig.TypeFloat:
		return opcua.TypeFloat
	case siteconfig.TypeString:
		return opcua.TypeString
	default:
		return opcua.TypeDouble
	}
}

// ownOPCUACheck refuses a site config with an OPC UA client connection
// to one of this cluster's own OPC UA servers (the same host and port as
// a member's opcua endpoint): that server answers one request at a time,
// so a device write routed back into it waits on itself until the write
// timeout and fails. The deploy pusher runs it before anything is stored.
func ownOPCUACheck(members []nodeconfig.Member) func(*siteconfig.Site) error {
	own := map[string]string{} // host:port -> member id
	for _, m := range members {
		if key, ok := opcuaHostPort(m.OPCUA); ok {
			own[key] = m.ID
		}
	}
	return func(site *siteconfig.Site) error {
		var errs []error
		for i, c := range site.Connections {
			if c.Kind != siteconfig.KindOPCUA || c.OPCUA == nil {
				continue
			}
			key, ok := opcuaHostPort(c.OPCUA.Endpoint)
			if id, mine := own[key]; ok && mine {
				errs = append(errs, fmt.Errorf("connections[%d] (%s): endpoint %s is %s's own OPC UA server: a client connection into this site's servers would wait on itself for every write; point it at the upstream server",
					i, c.Name, c.OPCUA.Endpoint, id))
			}
		}
		return errors.Join(errs...)
	}
}

// opcuaHostPort is endpoint's host:port, the host in lower case.
func opcuaHostPort(endpoint string) (string, bool) {
	host, port, err := nodeconfig.OPCUAHostPort(endpoint)
	if err != nil {
		return "", false
	}
	return net.JoinHostPort(strings.ToLower(host), strconv.Itoa(port)), true
}
