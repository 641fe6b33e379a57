package opcua

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"github.com/scadad/scadad/activegate"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/server"
	"github.com/gopcua/opcua/ua"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/field"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/uasec"
)

// ErrUnknownTag is returned by TagUpdate for an attribute the current model
// does not have (a feed racing a deploy that removed it); it is the field
// fan-out's ErrUnknownAttribute, so the fan-out forgets such values.
var ErrUnknownTag = field.ErrUnknownAttribute

// Server is scadad's OPC UA server. Create it with New, then Start it.
type Server struct {
	cfg    Config
	log    zerolog.Logger
	roles  RoleSource
	writer Writer
	gate   *activegate.Counter
	clock  Clock

	// lib is the library's server now serving; restartLibrary replaces
	// it when it stops taking connections. libOpts are its options but
	// the listen address.
	lib     atomic.Pointer[library]
	libOpts []server.Option
	front   *front // set by Start: the public port, in front of lib's loopback one
	ns      *siteNamespace
	metrics *metrics
	appURI  string
	// thumbprint is the server certificate's, as clients show it when
	// asked to trust it.
	thumbprint string
	key        any    // *rsa.PrivateKey, kept for user-token decryption and the front
	cert       []byte // the server's certificate (DER), for the front
	// trust decides which client certificates may open sessions on
	// secure channels; security is the configured profiles, resolved.
	trust    trustList
	security []uasec.Resolved

	sessions *sessionTable
	notify   *notifier
	subs     *subscriptions
	// refTypes is namespace 0's reference type hierarchy, read from the
	// first library's import.
	refTypes refHierarchy
	// continuations holds the Browse continuation points of each session.
	continuations *continuationPoints
	// conds are the site's alarm conditions (conditions.go); alarms
	// takes their methods; refreshes numbers ConditionRefresh calls.
	conds     *conditionTable
	alarms    AlarmActions
	refreshes atomic.Uint64

	level atomic.Uint32 // the published ServiceLevel

	mu           sync.Mutex // guards the health inputs below
	state        role.State
	dataFresh    bool
	peerKnown    bool
	peerOK       bool
	peerAt       time.Time
	startedAt    time.Time // when Start began serving (PeerStartGrace)
	shuttingDown bool
	levelAt      time.Time
	// electingSince is when the node, Standby or Active before, went into
	// an election; zero when it is not in one it came to from service.
	electingSince time.Time

	// warned spaces repeated warnings about the same refused client
	// (warnOnce): a client retrying every second must not flood the log.
	warnMu sync.Mutex
	warned map[string]time.Time

	// verifyMu runs one password verification at a time; decoy is what
	// an unknown user name is verified against (matchStoredUser).
	verifyMu  sync.Mutex
	decoyOnce sync.Once
	decoy     string

	kick    chan struct{}
	started atomic.Bool
	closed  atomic.Bool
	cancel  context.CancelFunc
	runCtx  context.Context // what Start serves under, a restarted library too
	wg      sync.WaitGroup
	// restartMu serializes replacing the library with Close; lastRestart
	// (under it) spaces replacements at least restartGap apart.
	restartMu   sync.Mutex
	lastRestart time.Time
	restartGap  time.Duration
}

// defaultRestartGap is the least time between two replacements of the
// library: a host that keeps resetting its port, or a flood of refused
// clients, must not have it rebuilt (and every session dropped) on each.
const defaultRestartGap = 30 * time.Second

// library is one instance of gopcua's server, listening on loopback
// behind the front.
type library struct {
	srv     *server.Server
	backend string // its listen address
	// stop ends the goroutines it started once it is replaced; Close's
	// cancel ends the last one's. Set when it is started.
	stop context.CancelFunc
}

// New builds a server; it listens only after Start.
func New(cfg Config, deps Deps) (*Server, error) {
	c := cfg.withDefaults()
	if c.Host == "" || c.Port <= 0 || c.Port > 65535 {
		return nil, fmt.Errorf("opcua config: host %q port %d: both are required", c.Host, c.Port)
	}
	if deps.Roles == nil {
		return nil, fmt.Errorf("opcua config: a RoleSource is required")
	}
	if deps.Writer == nil {
		return nil, fmt.Errorf("opcua config: a Writer is required")
	}
	if !c.AllowAnonymous && len(c.Users) == 0 && c.UserStore == nil {
		return nil, fmt.Errorf("opcua config: no identity enabled (allow anonymous or configure users)")
	}
	if c.ApplicationURI == "" && c.CertFile == "" && c.Certificate == nil {
		c.ApplicationURI = fmt.Sprintf("urn:scadad:%s:%d", c.Host, c.Port)
	}
	sec, err := resolveSecurity(c.Security)
	if err != nil {
		return nil, fmt.Errorf("opcua config: %w", err)
	}
	secure := false
	for _, s := range sec {
		secure = secure || s.Mode != ua.MessageSecurityModeNone
	}
	for _, u := range c.Users {
		if u.Name == "" || u.Password == "" {
			return nil, fmt.Errorf("opcua config: user %q needs a name and a password", u.Name)
		}
	}
	if len(c.Users) > 0 && !secure {
		return nil, fmt.Errorf("opcua config: user-name identities need a Sign or SignAndEncrypt profile")
	}
	if !secure {
		// Passwords are never taken over a channel without security.
		c.UserStore = nil
		if !c.AllowAnonymous {
			return nil, fmt.Errorf("opcua config: no identity enabled: anonymous is off, and user-name identities need a Sign or SignAndEncrypt profile")
		}
	}
	if secure && c.TrustedClientsDir == "" && c.Trust == nil {
		return nil, fmt.Errorf("opcua config: Sign and SignAndEncrypt profiles need a folder of trusted client certificates")
	}
	cert, key, err := loadIdentity(&c)
	if err != nil {
		return nil, fmt.Errorf("opcua config: %w", err)
	}
	clock := deps.Clock
	if clock == nil {
		clock = wallClock()
	}
	reg := deps.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("opcua metrics: %w", err)
	}
	// A server that is not built gives its metric names back, so a
	// corrected config can build one.
	built := false
	defer func() {
		if !built {
			m.unregister()
		}
	}()

	opts := []server.Option{
		server.ServerName(c.ApplicationName),
		server.ProductName("scadad"),
		server.SoftwareVersion(c.Build.SoftwareVersion),
		server.ManufacturerName("scadad"),
		server.Certificate(cert),
		server.PrivateKey(key),
		server.SetLogger(libraryLogger{deps.Logger}),
	}
	for _, s := range sec {
		opts = append(opts, server.EnableSecurity(s.PolicyURI, s.Mode))
	}
	if c.AllowAnonymous {
		opts = append(opts, server.EnableAuthMode(ua.UserTokenTypeAnonymous))
	}
	if len(c.Users) > 0 || c.UserStore != nil {
		opts = append(opts, server.EnableAuthMode(ua.UserTokenTypeUserName))
	}

	s := &Server{
		cfg:        c,
		log:        deps.Logger.With().Str("component", "opcua").Logger(),
		roles:      deps.Roles,
		writer:     deps.Writer,
		gate:       deps.Gate,
		alarms:     deps.Alarms,
		conds:      newConditionTable(),
		clock:      clock,
		libOpts:    opts,
		restartGap: defaultRestartGap,
		metrics:    m,
		key:        key,
		trust:      trustList{store: c.Trust, trusted: c.TrustedClientsDir, rejected: c.RejectedClientsDir},
		security:   sec,
		notify:     newNotifier(),
		state:      deps.Roles.Current(),
		dataFresh:  true,
		kick:       make(chan struct{}, 1),
	}
	s.appURI = applicationURIOf(cert)
	s.trust.folderOnly = func(cert *x509.Certificate) {
		thumb := uasec.Thumbprint(cert.Raw)
		s.warnOnce("folder:"+thumb, func(e *zerolog.Event) *zerolog.Event {
			return e.Str("certificate", uasec.DescribeCert(cert)).Str("folder", c.TrustedClientsDir)
		}, "OPC UA client certificate trusted by this node's trusted folder only: the other nodes may refuse it after a failover; run scadactl opcua trust import "+c.TrustedClientsDir+" (the folder is read for this release only)")
	}
	s.cert = cert
	s.thumbprint = uasec.Thumbprint(cert)
	s.ns = newSiteNamespace(c.NamespaceURI, c.SiteName, clock)
	s.subs = newSubscriptions(clock, s.log, m,
		subLimits{minInterval: c.MinPublishingInterval, maxInterval: c.MaxPublishingInterval, maxPerRequest: c.MaxNodesPerRequest,
			retainPerSub: maxRetainedPerSubscription, retainSessionBytes: maxRetainedSessionBytes, retainTotalBytes: maxRetainedBytes},
		func(nid *ua.NodeID) *ua.DataValue {
			return s.readOne(&ua.ReadValueID{NodeID: nid, AttributeID: ua.AttributeIDValue}, s.clock.Now())
		},
		s.nodeExists, sendOn)
	s.subs.euRange = s.ns.EURange
	s.subs.notifierOf = s.notifierOf
	s.continuations = newContinuationPoints()
	// A session that ends takes its subscriptions and continuation
	// points with it.
	s.sessions = newSessionTable(func(key string) {
		s.subs.dropSession(key)
		s.continuations.dropSession(key)
	}, clock.Now)
	// The first level is computed before anything can read it, so no client
	// ever sees the SDK default 255.
	s.recompute()
	lib, err := s.newLibrary()
	if err != nil {
		return nil, err
	}
	s.lib.Store(lib)
	built = true
	return s, nil
}

// newLibrary builds an instance of the library's server on a free loopback
// port (the public port is ours, front.go) with the site namespace, the
// redundancy nodes and every handler installed.
func (s *Server) newLibrary() (*library, error) {
	port, err := loopbackPort(context.Background())
	if err != nil {
		return nil, err
	}
	srv := server.New(append(slices.Clone(s.libOpts), server.EndPoint("127.0.0.1", port))...)
	// Part 5, 8.2.3 (NamespaceArray): index 1 is the local server's own
	// namespace, its ApplicationUri; the site's namespace, shared by both
	// servers of the pair (each has its own ApplicationUri), follows at 2.
	// Clients resolve it by its URI.
	server.NewNodeNameSpace(srv, s.appURI)
	srv.AddNamespace(s.ns)
	if err := s.linkSiteFolder(srv); err != nil {
		return nil, err
	}
	if s.refTypes == nil { // the first library; a restarted one imports the same
		n0, err := ns0(srv)
		if err != nil {
			return nil, err
		}
		s.refTypes = buildRefHierarchy(n0)
		s.ns.refTypes = s.refTypes
	}
	if err := s.installRedundancyNodes(srv); err != nil {
		return nil, err
	}
	if err := s.installBuildInfo(srv); err != nil {
		return nil, err
	}
	if err := s.installServerObject(srv); err != nil {
		return nil, err
	}
	if err := s.registerHandlers(srv); err != nil {
		return nil, err
	}
	return &library{srv: srv, backend: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}, nil
}

// srv is the library's server now serving.
func (s *Server) srv() *server.Server { return s.lib.Load().srv }

// Start listens and serves until ctx is cancelled or Close is called.
func (s *Server) Start(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("start opcua server: already closed")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.cfg.Port)))
	if err != nil {
		return fmt.Errorf("start opcua server on %s: %w", s.cfg.endpointURL(), err)
	}
	ln = s.guardListener(ln)
	runCtx, cancel := context.WithCancel(ctx)
	lib := s.lib.Load()
	var libCtx context.Context
	libCtx, lib.stop = context.WithCancel(runCtx)
	if err := lib.srv.Start(libCtx); err != nil {
		cancel()
		ln.Close()
		return fmt.Errorf("start opcua server on %s (its loopback listener %s): %w", s.cfg.endpointURL(), lib.backend, err)
	}
	s.cancel, s.runCtx = cancel, runCtx
	s.front = newFront(ln, lib.backend, frontLimits{
		hello: s.cfg.HelloTimeout, answer: min(s.cfg.HelloTimeout, defaultLibraryAnswer),
		dial: defaultFrontDial, maxWaiting: defaultMaxWaiting, stalled: defaultStalled,
	}, s.log, s.metrics)
	s.front.backendDead = func(backend string, why error) { go s.restartLibrary(backend, why) }
	s.front.rules = s.channelRules()
	s.front.key, _ = s.key.(*rsa.PrivateKey)
	s.front.cert = s.cert
	s.front.channelRefused = func(remote net.Addr, why *channelRefusedError) {
		s.warnOnce(why.reason()+":"+why.policy, func(e *zerolog.Event) *zerolog.Event {
			return e.Stringer("remote", remote).Str("policy", why.policy).Str("reason", why.logReason())
		}, "OPC UA secure channel refused")
	}
	s.mu.Lock()
	s.startedAt = s.clock.Now()
	s.mu.Unlock()
	s.started.Store(true)
	s.wg.Add(4)
	go func() {
		defer s.wg.Done()
		s.front.run()
	}()
	go func() {
		defer s.wg.Done()
		s.notify.run(runCtx, s.changeNotification)
	}()
	go func() {
		defer s.wg.Done()
		s.subs.run(runCtx)
	}()
	go func() {
		defer s.wg.Done()
		s.follow(runCtx)
	}()
	s.log.Info().Str("endpoint", s.cfg.endpointURL()).Str("application_uri", s.appURI).Str("certificate_thumbprint", s.thumbprint).
		Uint8("service_level", s.ServiceLevel()).Msg("opcua server started")
	return nil
}

// Close publishes ServiceLevel 0, then stops serving.
func (s *Server) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	// Its metric names go back to the registry for the server that may
	// replace it (a deploy that changes the server's options).
	defer s.metrics.unregister()
	s.mu.Lock()
	s.shuttingDown = true
	s.mu.Unlock()
	s.recompute()
	if !s.started.Load() {
		return nil
	}
	// Hand the 0 to the subscriptions now and give them a publishing cycle
	// to deliver it: clients then leave at once, instead of waiting out the
	// library's Close, which holds every connection open for seconds (its
	// server-side channel Close sends a CloseSecureChannel request and waits
	// for a reply no client sends). The wall clock is used on purpose: this
	// is a bounded shutdown wait, not a decision the tests drive.
	s.changeNotification(ua.NewNumericNodeID(0, id.Server_ServiceLevel))
	if s.cfg.ShutdownGrace > 0 {
		grace := time.NewTimer(s.cfg.ShutdownGrace)
		<-grace.C
	}
	// Connections first: the library then finds its channels ended instead
	// of waiting for their clients (see closeLibrary).
	s.front.close(closeWait)
	s.restartMu.Lock() // a restart under way finishes first; later ones see closed
	err := s.closeLibrary(s.lib.Load())
	s.restartMu.Unlock()
	s.cancel()
	s.wg.Wait()
	s.subs.close()
	if err != nil {
		return fmt.Errorf("close opcua server: %w", err)
	}
	return nil
}

// closeLibraryWait bounds how long Close waits for the library's server to
// close. gopcua waits up to 10 s for every client connection to end,
// and a client that keeps its session open (a redundancy-aware client keeps
// one to each node) never ends it: a node stopping would take 10 s more.
const closeLibraryWait = 2 * time.Second

// closeLibrary closes the library's server (listener first, so no new
// connection is taken) and waits for it at most closeLibraryWait. After that
// the connections still open are left to their clients or to the process
// exit; their channels were sent CloseSecureChannel and the context that
// serves them is cancelled next.
func (s *Server) closeLibrary(lib *library) error {
	done := make(chan error, 1)
	go func() { done <- lib.srv.Close() }()
	wait := time.NewTimer(closeLibraryWait)
	defer wait.Stop()
	select {
	case err := <-done:
		return err
	case <-wait.C:
		s.log.Info().Dur("waited", closeLibraryWait).Msg("opcua server closed with client connections still open; the clients hang up on their own")
		return nil
	}
}

// restartLibrary replaces the library's server listening on backend, which
// took a connection the front handed it and did not answer the Hello (why):
// its accept loop ends for good on a connection reset before a Hello
// (WORKAROUNDS.md row 17), and the front keeps only remote clients from
// its loopback port, not local processes. The new instance serves the same
// namespace, handlers and state on a new loopback port; the old one's
// connections are closed and their clients reconnect, with new sessions.
func (s *Server) restartLibrary(backend string, why error) {
	s.restartMu.Lock()
	defer s.restartMu.Unlock()
	old := s.lib.Load()
	if s.closed.Load() || old.backend != backend {
		return // closing, or already replaced
	}
	if now := s.clock.Now(); !s.lastRestart.IsZero() && now.Sub(s.lastRestart) < s.restartGap {
		s.log.Warn().AnErr("because", why).Dur("last_restart_ago", now.Sub(s.lastRestart)).
			Msg("opcua server not taking new connections again; not restarting it again this soon")
		return
	}
	lib, err := s.newLibrary()
	if err == nil {
		var libCtx context.Context
		libCtx, lib.stop = context.WithCancel(s.runCtx)
		if err = lib.srv.Start(libCtx); err != nil {
			lib.stop()
			lib.srv.Close()
		}
	}
	if err != nil {
		s.log.Error().Err(err).AnErr("because", why).Str("loopback", backend).
			Msg("opcua server stopped taking new connections and could not be restarted; the next refused client tries again")
		return
	}
	// The old instance's sessions cannot go on (their clients come back
	// with new ones); dropped before the new instance takes any.
	s.sessions.dropAll()
	s.lib.Store(lib)
	s.front.setBackend(lib.backend)
	s.front.closeBackend(old.backend)
	if err := s.closeLibrary(old); err != nil {
		s.log.Warn().Err(err).Msg("close the stopped opcua library server")
	}
	old.stop()
	s.lastRestart = s.clock.Now()
	s.metrics.restarts.Inc()
	s.log.Error().AnErr("because", why).Str("old_loopback", backend).Str("loopback", lib.backend).
		Msg("opcua server stopped taking new connections; restarted it: its clients reconnect")
}

// Endpoint is the URL clients connect to.
func (s *Server) Endpoint() string { return s.cfg.endpointURL() }

// ApplicationURI is the URI this server lists first in ServerArray.
func (s *Server) ApplicationURI() string { return s.appURI }

// ServiceLevel is the level currently published.
func (s *Server) ServiceLevel() byte { return byte(s.level.Load()) }

// SetDataFresh tells the server whether its tag feed is current.
func (s *Server) SetDataFresh(fresh bool) {
	s.mu.Lock()
	s.dataFresh = fresh
	s.mu.Unlock()
	s.poke()
}

// SetPeerVerdict records what the peer last reported about reaching this
// node's endpoint (shared over the peer link), observed at at.
func (s *Server) SetPeerVerdict(reachable bool, at time.Time) {
	s.mu.Lock()
	s.peerKnown, s.peerOK, s.peerAt = true, reachable, at
	s.mu.Unlock()
	s.poke()
}

// ForgetPeerVerdict drops the peer's verdict: a peer that cannot be asked
// (it is down or cut off) has no say about this node's reachability, so a
// survivor is not held out of the healthy tiers by its dead peer's last word.
func (s *Server) ForgetPeerVerdict() {
	s.mu.Lock()
	s.peerKnown = false
	s.mu.Unlock()
	s.poke()
}

// ApplyModel moves the address space to m by difference.
func (s *Server) ApplyModel(m Model) (ModelDiff, error) {
	if err := m.validate(); err != nil {
		return ModelDiff{}, fmt.Errorf("apply opcua model: %w", err)
	}
	d, touched := s.ns.apply(m)
	s.notify.add(touched...)
	s.log.Info().Int("instances_added", d.AddedInstances).Int("instances_removed", d.RemovedInstances).
		Int("attributes_added", d.AddedAttributes).Int("attributes_removed", d.RemovedAttributes).
		Int("attributes_changed", d.ChangedAttributes).Int("attributes_kept", d.KeptAttributes).
		Msg("opcua address space updated")
	return d, nil
}

// TagUpdate stores a value from the feed, served with status (the
// source's StatusCode whole: field.Quality.Status for a gateway's DA quality, the
// upstream's for an OPC UA source), and notifies subscribers. value is
// converted exactly to the attribute's declared type; a value that does
// not fit keeps the last value with status BadTypeMismatch.
func (s *Server) TagUpdate(instance, attribute string, value any, status ua.StatusCode, sourceTime time.Time) error {
	found, err := s.ns.update(instance, attribute, func(t DataType) (*ua.Variant, error) {
		if value == nil {
			if isGood(status) {
				return nil, fmt.Errorf("good quality without a value")
			}
			return nil, nil
		}
		return coerce(t, value)
	}, status, sourceTime)
	if !found {
		return fmt.Errorf("tag update %s.%s: %w", instance, attribute, ErrUnknownTag)
	}
	s.notify.add(s.ns.varID(instance, attribute))
	if err != nil {
		return fmt.Errorf("tag update %s.%s: %w", instance, attribute, err)
	}
	return nil
}

// NodeID names the variable of an attribute, as clients address it.
func (s *Server) NodeID(instance, attribute string) *ua.NodeID {
	return s.ns.varID(instance, attribute)
}

func (s *Server) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// follow recomputes the ServiceLevel whenever an input changes, and on a
// period so that an expiring peer verdict takes effect.
func (s *Server) follow(ctx context.Context) {
	ch, stop := s.roles.Watch()
	defer stop()
	for {
		select {
		case st := <-ch:
			s.mu.Lock()
			s.followElection(s.state, st)
			s.state = st
			s.mu.Unlock()
		case <-s.kick:
		case <-s.clock.After(s.cfg.RecheckInterval):
		case <-ctx.Done():
			return
		}
		s.recompute()
		s.expireSessions()
	}
}

// expireSessions forgets the sessions of clients that stopped sending
// requests for their session timeout (the library keeps them for ever),
// and publishes the count.
func (s *Server) expireSessions() {
	if n := s.sessions.expire(s.subs.waiting); n > 0 {
		s.metrics.sessionsExpired.Add(float64(n))
		s.log.Info().Int("sessions", n).Msg("opcua sessions expired: their clients sent nothing for their session timeout")
	}
	s.metrics.sessions.Set(float64(s.sessions.count()))
}

// followElection notes when a node in service (Standby or Active) goes
// into an election, and forgets it when the election ends. Called with
// s.mu held.
func (s *Server) followElection(prev, next role.State) {
	switch {
	case !next.Electing || next.Role != role.Detached:
		s.electingSince = time.Time{}
	case s.electingSince.IsZero() && (prev.Role == role.Standby || prev.Role == role.Active):
		s.electingSince = s.clock.Now()
	}
}

func (s *Server) health() Health {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	reach := EffectivePeerReach(s.peerOK, s.peerKnown, s.peerAt, now, s.cfg.PeerVerdictTTL)
	if reach == ReachFailed && now.Sub(s.startedAt) < s.cfg.PeerStartGrace {
		reach = ReachUnknown
	}
	return Health{
		Role:          s.state.Role,
		QuorumContact: s.state.Leader != "",
		DataFresh:     s.dataFresh,
		PeerReachesMe: reach,
		ShuttingDown:  s.shuttingDown,
		Electing:      !s.electingSince.IsZero() && now.Sub(s.electingSince) <= s.cfg.ElectionGrace,
	}
}

func (s *Server) recompute() {
	h := s.health()
	lvl := ComputeServiceLevel(h)
	old := s.level.Swap(uint32(lvl))
	if old == uint32(lvl) && s.metrics.levelPublished.Load() {
		return
	}
	s.metrics.levelPublished.Store(true)
	s.mu.Lock()
	s.levelAt = s.clock.Now()
	s.mu.Unlock()
	s.metrics.serviceLevel.Set(float64(lvl))
	s.metrics.levelChanges.WithLabelValues(fmt.Sprint(lvl)).Inc()
	s.log.Info().Uint8("service_level", lvl).Uint32("previous", old).Stringer("role", h.Role).
		Bool("quorum_contact", h.QuorumContact).Bool("data_fresh", h.DataFresh).
		Stringer("peer_reaches_me", h.PeerReachesMe).Bool("shutting_down", h.ShuttingDown).
		Msg("opcua service level")
	s.notify.add(ua.NewNumericNodeID(0, id.Server_ServiceLevel))
}

// changeNotification hands a node's current value to the monitored items
// watching it (subscriptions.go; the library's ChangeNotification is never
// called, see WORKAROUNDS.md).
func (s *Server) changeNotification(nid *ua.NodeID) {
	defer func() {
		if r := recover(); r != nil {
			s.metrics.panics.WithLabelValues("change-notification").Inc()
			s.log.Error().Interface("panic", r).Stringer("node", nid).Msg("opcua change notification failed")
		}
	}()
	s.subs.changed(nid)
}

// notifier keeps the feeds (TagUpdate, ApplyModel, ServiceLevel changes)
// off the subscriptions' lock: they only mark node ids dirty, and one
// goroutine hands each dirty node to the subscriptions once, however often
// it changed meanwhile.
type notifier struct {
	mu      sync.Mutex
	pending map[string]*ua.NodeID
	wake    chan struct{}
}

func newNotifier() *notifier {
	return &notifier{pending: make(map[string]*ua.NodeID), wake: make(chan struct{}, 1)}
}

func (n *notifier) add(ids ...*ua.NodeID) {
	if len(ids) == 0 {
		return
	}
	n.mu.Lock()
	for _, nid := range ids {
		n.pending[nid.String()] = nid
	}
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

func (n *notifier) run(ctx context.Context, push func(*ua.NodeID)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.wake:
		}
		n.mu.Lock()
		batch := n.pending
		n.pending = make(map[string]*ua.NodeID)
		n.mu.Unlock()
		for _, nid := range batch {
			push(nid)
		}
	}
}

// libraryLogger routes gopcua's printf-style server logs into zerolog; its
// Debug output is per request, so it goes to Trace.
type libraryLogger struct{ l zerolog.Logger }

func (g libraryLogger) Debug(msg string, args ...any) { g.l.Trace().Msgf(msg, args...) }
func (g libraryLogger) Info(msg string, args ...any)  { g.l.Debug().Msgf(msg, args...) }
func (g libraryLogger) Warn(msg string, args ...any) {
	// A client that hangs up (the peer's probe does every 2 s) and a
	// server that stops are warnings to gopcua, routine to an operator.
	if strings.HasPrefix(msg, "Secure Channel %d closed") || strings.HasPrefix(msg, "Context done, closing Secure Channel") {
		g.l.Debug().Msgf(msg, args...)
		return
	}
	g.l.Warn().Msgf(msg, args...)
}
func (g libraryLogger) Error(msg string, args ...any) {
	// The built-in nodeset import reports its own duplicates as errors on
	// every New; they are not ours to act on.
	if strings.HasPrefix(msg, "Duplicate reference type") {
		g.l.Trace().Msgf(msg, args...)
		return
	}
	// A connection closed under a read (a client gone, or this server
	// stopping) is not an error anyone can act on.
	line := fmt.Sprintf(msg, args...)
	if strings.Contains(line, "use of closed network connection") || strings.HasPrefix(msg, "socket closed") {
		g.l.Debug().Msg(line)
		return
	}
	g.l.Error().Msg(line)
}

// channelRules are the channels the front lets through: the configured
// policies, and None, which every server offers for discovery (sessions on
// it are refused unless a None profile is configured: admitChannel); and,
// for a policy configured with SignAndEncrypt but not Sign, encryption.
func (s *Server) channelRules() channelRules {
	r := channelRules{policies: map[string]bool{ua.SecurityPolicyURINone: true}, encryptOnly: map[string]bool{}}
	signs := map[string]bool{}
	for _, res := range s.security {
		uri := res.PolicyURI
		r.policies[uri] = true
		switch res.Mode {
		case ua.MessageSecurityModeSign:
			signs[uri] = true
		case ua.MessageSecurityModeSignAndEncrypt:
			r.encryptOnly[uri] = true
		}
	}
	for uri := range signs {
		delete(r.encryptOnly, uri)
	}
	if s.cfg.TrustedClientsDir != "" || s.cfg.Trust != nil {
		r.trusts = func(der []byte) error { return s.trust.check(der, s.clock.Now()) }
	}
	r.discoveryOnly = !s.offersNone()
	return r
}

// offersNone says whether a None profile is configured; otherwise a None
// channel serves discovery only.
func (s *Server) offersNone() bool {
	return slices.ContainsFunc(s.security, func(r uasec.Resolved) bool { return r.Mode == ua.MessageSecurityModeNone })
}

// warnEvery is how often the same refusal is logged again as a warning.
const warnEvery = 10 * time.Minute

// warnOnce logs msg as a warning unless the same key was warned about in
// the last warnEvery; the repeats go to debug.
func (s *Server) warnOnce(key string, fields func(*zerolog.Event) *zerolog.Event, msg string) {
	now := s.clock.Now()
	s.warnMu.Lock()
	last, seen := s.warned[key]
	fresh := !seen || now.Sub(last) >= warnEvery
	if fresh {
		if s.warned == nil || len(s.warned) >= 1024 {
			s.warned = make(map[string]time.Time)
		}
		s.warned[key] = now
	}
	s.warnMu.Unlock()
	if fresh {
		fields(s.log.Warn()).Msg(msg)
		return
	}
	fields(s.log.Debug()).Msg(msg)
}
