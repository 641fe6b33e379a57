package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"os"
	"sync"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/scadad/scadad/activegate"
	"github.com/scadad/scadad/alarms"
	"github.com/scadad/scadad/certexpiry"
	"github.com/scadad/scadad/control"
	"github.com/scadad/scadad/deploy"
	"github.com/scadad/scadad/featuregate"
	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/httpgate"
	"github.com/scadad/scadad/integrity"
	"github.com/scadad/scadad/internal/boltsafe"
	"github.com/scadad/scadad/internal/grpcdial"
	"github.com/scadad/scadad/internal/netguard"
	"github.com/scadad/scadad/internal/version"
	"github.com/scadad/scadad/nodeconfig"
	"github.com/scadad/scadad/pki"
	"github.com/scadad/scadad/raftnode"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/siteconfig"
)

// apiStreamWorkers is how many goroutines wait to serve control API calls.
// A call finding none idle gets a new goroutine, whose stack grows by
// copying on every call, so there must be enough for every enqueue client
// waiting on its commit (measured: bench/results/2026-12-01-5dd764a.md).
const apiStreamWorkers = 128

// deployStepSpacing coalesces the FSM changes the deploy Applier wakes on
// (one per applied batch) into at most one look at the deployment pointer
// per 20 ms: a deploy reaches the site config at most that much later.
const deployStepSpacing = 20 * time.Millisecond

// apiServerOptions bound what one client of the control API may hold. The
// API asks for a client certificate, but the TLS handshake itself is open
// to anyone who can connect, so it is bounded in time; an authenticated
// client is bounded in streams, ping rate and message size
// (grpcdial.MaxMessageBytes: a site config artifact fits), and a client that vanished without closing is
// found by keepalive pings instead of holding its connection for good.
func apiServerOptions() []grpc.ServerOption {
	return append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(grpcdial.MaxMessageBytes), grpc.MaxSendMsgSize(grpcdial.MaxMessageBytes),
		grpc.NumStreamWorkers(apiStreamWorkers),
		grpc.MaxConcurrentStreams(256),
		grpc.MaxHeaderListSize(1 << 20),
		grpc.ConnectionTimeout(10 * time.Second),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}, grpcdial.ServerFlowControl()...)
}

// daemon is one scadad process: what its parts are wired from, and the
// group they run in. cmd/scadad only wires: each part's behaviour is in the
// package that owns it.
type daemon struct {
	cfg     *nodeconfig.Config
	log     zerolog.Logger
	reg     *prometheus.Registry
	budgets listenerBudgets
	state   *fsm.FSM
	node    *raftnode.Node
	// roles is the raft role stream; acting is it only while a quorum
	// keeps confirming it (raftnode's Acting), which is what side effects
	// (delivery, workers, the OPC UA server's role) follow.
	roles, acting role.Source
	fwd           *control.Forwarder
	holder        *siteconfig.Holder
	// serverTLS is the node's listener TLS; peerConns tracks every
	// accepted connection by its certificate, for revocations.
	serverTLS *tls.Config
	peerConns *pki.Tracker

	// The parts run in runCtx until the shutdown cancels it. A part that
	// stops with an error is logged and the others go on, as a node keeps
	// serving what it still can (so not an errgroup, whose first error
	// would stop them all).
	runCtx context.Context
	parts  sync.WaitGroup
}

// run runs one part in the group until the daemon stops.
func (d *daemon) run(name string, fn func(context.Context) error) {
	d.parts.Go(func() {
		if err := fn(d.runCtx); err != nil && !errors.Is(err, context.Canceled) {
			d.log.Error().Err(err).Str("part", name).Msg("stopped with an error")
		}
	})
}

// runDaemon wires the parts and runs until ctx ends, then shuts down in
// reverse order.
func runDaemon(ctx context.Context, cfg *nodeconfig.Config, log zerolog.Logger) error {
	d := &daemon{cfg: cfg, log: log}
	collectorSettingsFor(cfg.Runtime, os.Getenv).apply(log)
	stdlog.SetFlags(0)
	stdlog.SetOutput(stdlogWriter{log.With().Str("part", "stdlog").Logger()})
	serverTLS, err := pki.LoadServerTLS(cfg.TLS.CA, cfg.TLS.Cert, cfg.TLS.Key)
	if err != nil {
		return fmt.Errorf("node certificate: %w", err)
	}
	clientTLS, err := pki.LoadClientTLS(cfg.TLS.CA, cfg.TLS.Cert, cfg.TLS.Key)
	if err != nil {
		return fmt.Errorf("node certificate: %w", err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}

	startFenced, err := healPrepare(cfg)
	if err != nil {
		return err
	}
	state, err := openState(fsmPath(cfg), cfg.State.ScrubCPUShare, log)
	if err != nil {
		return withRecovery(fmt.Errorf("open state: %w", err))
	}
	defer state.Close()
	// Every listener and every dial refuses a revoked certificate at the
	// handshake, from the replicated deny list; tracked connections of one
	// are closed when its revocation is applied (control.CloseRevokedConnections).
	revoked := func(serial string) bool { return state.Access().IsRevoked(serial) }
	pki.RefuseRevoked(serverTLS, revoked)
	pki.RefuseRevoked(clientTLS, revoked)
	peerConns := pki.NewTracker()
	d.serverTLS, d.peerConns = serverTLS, peerConns

	d.state = state
	reg := prometheus.NewRegistry()
	d.reg = reg
	budgets := fitListenerBudgets(cfg, netguard.DescriptorLimit(), log)
	d.budgets = budgets
	raftLis, err := guardedListen(reg, log, "raft", cfg.Cluster.RaftBind, budgets.raft)
	if err != nil {
		return err
	}

	var members []raftnode.Member
	apiAddrs := map[string]string{}
	var ctlMembers []control.Member
	for _, m := range cfg.Cluster.Members {
		members = append(members, raftnode.Member{ID: m.ID, RaftAddr: m.RaftAddr, Witness: m.Witness})
		apiAddrs[m.ID] = m.APIAddr
		ctlMembers = append(ctlMembers, control.Member{ID: m.ID, RaftAddr: m.RaftAddr, APIAddr: m.APIAddr, Witness: m.Witness})
	}

	// The override callback needs the node, which needs the callback.
	var node *raftnode.Node
	onOverride := func(ctx context.Context, newEpoch uint64) error {
		cmd := &fsmpb.Command{
			Version:       fsm.CommandVersion,
			StampUnixNano: time.Now().UnixNano(),
			Actor:         cfg.NodeID,
			Body: &fsmpb.Command_SetClusterEpoch{SetClusterEpoch: &fsmpb.SetClusterEpoch{
				Epoch: newEpoch, NodeId: cfg.NodeID,
				Reason: fmt.Sprintf("availability override: no contact with the peer for %s", cfg.Cluster.OverrideAfter.D()),
			}},
		}
		data, err := fsm.Encode(cmd)
		if err != nil {
			return err
		}
		out, err := node.Apply(ctx, data)
		if err != nil {
			return err
		}
		if res, ok := out.(*fsm.Result); ok && res.Err != nil {
			return res.Err
		}
		return nil
	}
	node, err = raftnode.New(raftnode.Config{
		NodeID:             cfg.NodeID,
		BindAddr:           cfg.Cluster.RaftBind,
		Listener:           raftLis,
		DataDir:            raftDir(cfg),
		LogStore:           raftnode.LogStore(cfg.Raft.LogStore),
		LeaderWrite:        raftnode.LeaderWrite(cfg.Raft.LeaderWrite),
		ReleaseLogPages:    dropMapped,
		Members:            members,
		Mode:               raftnode.Mode(cfg.Cluster.Mode),
		OverrideAfter:      cfg.Cluster.OverrideAfter.D(),
		HeartbeatTimeout:   cfg.Cluster.HeartbeatTimeout.D(),
		ElectionTimeout:    cfg.Cluster.ElectionTimeout.D(),
		LeaderLeaseTimeout: cfg.Cluster.LeaderLease.D(),
		SnapshotThreshold:  cfg.Cluster.SnapshotThreshold,
		SnapshotInterval:   cfg.Cluster.SnapshotInterval.D(),
		ServerTLS:          serverTLS,
		ClientTLS:          clientTLS,
		Conns:              peerConns,
		Logger:             log.With().Str("part", "raft").Logger(),
		FSM:                state,
		AppliedIndex:       func() uint64 { return state.Meta().AppliedIndex },
		OnOverride:         onOverride,
		StartFenced:        startFenced,
		ApplyBlocked:       func() bool { return state.ApplyBlocked() != nil },
	})
	if err != nil {
		raftLis.Close()
		return withRecovery(fmt.Errorf("start raft: %w", err))
	}
	roles := node.Role()
	// Side effects follow the role only while a quorum keeps confirming it
	// (half a heartbeat timeout: no other node can even start an election
	// sooner), see raftnode's Acting.
	acting := node.Acting(cfg.Cluster.HeartbeatTimeout.D() / 2)
	d.node, d.roles, d.acting = node, roles, acting

	metrics := newNodeMetrics(reg)
	validity, err := pki.ReadValidity(cfg.TLS.CA, cfg.TLS.Cert)
	if err != nil {
		return fmt.Errorf("node certificate: %w", err)
	}
	if err := certexpiry.Register(reg, validity); err != nil {
		return err
	}
	if err := registerDiskSpace(reg, cfg.DataDir); err != nil {
		return err
	}
	site, err := newSiteInfo(reg)
	if err != nil {
		return err
	}

	build := version.Get()
	if err := registerBuildInfo(reg, build, state); err != nil {
		return err
	}
	timed := timedNode{Node: node, hist: metrics.applyLatency}
	gated := gatedNode{timedNode: timed, gate: &featuregate.Gate{Next: timed, Levels: state, Members: raftMembers(node), Changes: state.Changes}}
	fwd := control.NewForwarder(cfg.NodeID, apiAddrs, clientTLS, roles, gated, 2*cfg.Cluster.ElectionTimeout.D())
	defer fwd.Close()
	d.fwd = fwd

	holder := siteconfig.NewHolder()
	d.holder = holder
	// An operator's write through the Standby shows in that node's own
	// answers from the moment it is acknowledged.
	seen := control.SeenLocally{Proposer: fwd, Applied: state}
	pusher := &deploy.Pusher{Proposer: seen, State: state, Now: time.Now, Check: ownOPCUACheck(cfg.Cluster.Members)}
	deployMetrics, err := deploy.NewMetrics(reg)
	if err != nil {
		return err
	}
	applier := &deploy.Applier{NodeID: cfg.NodeID, State: state, Proposer: fwd, Holder: holder, Now: time.Now, Log: log.With().Str("part", "deploy").Logger(), Metrics: deployMetrics,
		StepSpacing: deployStepSpacing}

	srv := &control.Server{
		NodeID:       cfg.NodeID,
		Mode:         cfg.Cluster.Mode,
		Version:      build.Version,
		Revision:     build.Revision,
		Features:     stateFeatures{state},
		Configured:   ctlMembers,
		Raft:         gated,
		Restorer:     snapshotRestorer{node},
		Roles:        roles,
		State:        state,
		Forward:      fwd,
		Pusher:       pusher,
		TempDir:      cfg.DataDir,
		Log:          log.With().Str("part", "control").Logger(),
		CertNotAfter: validity.Cert,
		CANotAfter:   validity.CA,
		HTTPAddr:     cfg.HTTP.Listen,
		Checkpoints:  state.Checkpoints,
	}
	// Every control and heal RPC passes the caller's role check first, on
	// every node, forwarded calls included.
	authz := &control.Authorizer{Configured: ctlMembers, Roots: serverTLS.ClientCAs, Revoked: revoked, Now: time.Now}
	grpcServer := grpc.NewServer(append(apiServerOptions(), grpc.Creds(control.RevocableCreds(credentials.NewTLS(serverTLS), peerConns)),
		grpc.ChainUnaryInterceptor(authz.Unary), grpc.ChainStreamInterceptor(authz.Stream))...)
	healing := d.newHealWiring(ctlMembers)
	healing.register(grpcServer, srv)
	apiLis, err := guardedListen(reg, log, "api", cfg.API.Listen, budgets.api)
	if err != nil {
		return err
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	d.runCtx = runCtx
	bodies := netguard.NewBodyBudget(cfg.HTTP.MaxBodyBytesInFlight)
	sf, sfHTTP, err := d.startStoreForward(bodies)
	if err != nil {
		return err
	}
	srv.SF = sf
	gateCounter, err := activegate.NewCounter(reg)
	if err != nil {
		return err
	}
	alarmMetrics, err := alarms.NewMetrics(reg)
	if err != nil {
		return err
	}
	alarmSvc, err := alarms.New(alarms.Options{Proposer: fwd, State: state, Roles: acting, Enqueuer: sf.enqueuer, Gate: gateCounter,
		Metrics: alarmMetrics, NodeID: cfg.NodeID, Logger: log.With().Str("part", "alarms").Logger()})
	if err != nil {
		return err
	}
	d.run("alarms", alarmSvc.Run)
	srv.Alarms = alarmSvc
	devices, fanout, conns, err := d.startTagWorkers(sf.enqueuer, sf.metrics, alarmSvc)
	if err != nil {
		return err
	}
	srv.Connections = conns.Status
	if ua := d.startOPCUA(devices, fanout, gateCounter, alarmSvc); ua != nil {
		srv.OPCUA = ua.status
	}
	d.run("control-api", func(context.Context) error { return grpcServer.Serve(apiLis) })
	d.run("revocations", func(ctx context.Context) error {
		control.CloseRevokedConnections(ctx, state, peerConns, log.With().Str("part", "tls").Logger())
		return nil
	})
	d.run("heal", healing.run)
	leaders := &control.LeaderAudit{NodeID: cfg.NodeID, Roles: roles, State: state, Audit: fwd, Now: time.Now,
		Log: log.With().Str("part", "leader-audit").Logger()}
	d.run("leader-audit", leaders.Run)
	recorder := &featuregate.Recorder{NodeID: cfg.NodeID, Level: fsm.FeatureLevel, Version: build.Version, Propose: fwd, Local: state,
		Roles: roles, Now: time.Now, Log: log.With().Str("part", "features").Logger()}
	d.run("feature-level", recorder.Run)
	d.run("deploy", applier.Run)
	d.run("site-info", func(ctx context.Context) error {
		followSite(ctx, holder, func(u siteconfig.Update) { site.set(u.Site.Name) })
		return nil
	})
	certs := certexpiry.Watch{Validity: validity, Now: time.Now, Log: log.With().Str("part", "tls").Logger()}
	d.run("certificates", certs.Run)
	scrub := &integrity.Scrubber{
		Interval: cfg.State.ScrubInterval.D(), BytesPerSecond: cfg.State.ScrubBytesPerSecond,
		Pair: cfg.Cluster.Mode == nodeconfig.ModePair, State: state, Node: node,
		// A damaged file can still panic bbolt while it is emptied.
		Reset: func(ctx context.Context) error {
			return boltsafe.Guard(state.Path(), func() error { return state.Empty(ctx, cfg.DataDir) })
		},
		Metrics: integrity.NewScrubMetrics(reg), Log: log.With().Str("part", "scrub").Logger(), Now: time.Now,
	}
	d.run("scrub", scrub.Run)
	checkpoints := &integrity.Checkpointer{
		NodeID: cfg.NodeID, Interval: cfg.State.CheckpointInterval.D(), State: state, Propose: fwd, Roles: roles,
		Voters: raftVoters(node), Rebuild: scrub.Rebuild, Metrics: integrity.NewCheckpointMetrics(reg),
		Log: log.With().Str("part", "checkpoint").Logger(), Now: time.Now, Tick: time.Second,
	}
	d.run("checkpoint", checkpoints.Run)
	d.run("state-commits", func(ctx context.Context) error {
		commitStateEvery(ctx, state, stateCommitInterval)
		return nil
	})
	d.run("mapped-pages", func(ctx context.Context) error {
		releaseMappedPages(ctx, state, node, mappedReleaseInterval)
		return nil
	})
	d.run("metrics", func(ctx context.Context) error {
		metrics.sampleEvery(ctx, time.Second, func() (role.State, statsSample) {
			s := node.Stats()
			st := roles.Current()
			contact := time.Duration(-1)
			switch {
			case st.Role == role.Active:
				contact = 0
			case !s.LastContact.IsZero():
				contact = time.Since(s.LastContact)
			}
			return st, statsSample{term: s.Term, commit: s.CommitIndex, applied: state.Meta().AppliedIndex, lastContact: contact, unconfirmed: s.Unconfirmed}
		})
		return nil
	})

	httpServer, httpStopped, err := d.startHTTP(srv, sfHTTP, bodies)
	if err != nil {
		return err
	}
	log.Info().Str("mode", cfg.Cluster.Mode).Str("raft", cfg.Cluster.RaftBind).Str("api", cfg.API.Listen).Str("http", cfg.HTTP.Listen).Str("version", build.Version).
		Uint32("fsm_feature_level", uint32(fsm.FeatureLevel)).Msg("scadad started")
	// Type=notify: systemd counts the service started once every listener
	// is up, and restarts it when the watchdog pings stop.
	var sd sdNotifier = systemdNotifier{}
	if _, err := sd.Notify(sddaemon.SdNotifyReady); err != nil {
		log.Warn().Err(err).Msg("systemd readiness notification failed")
	}
	d.run("watchdog", func(ctx context.Context) error {
		keepWatchdog(ctx, sd, watchdogEvery(), func() bool { return state.Err() == nil && d.node.LogFailure() == nil }, log)
		return nil
	})

	stopErr := d.waitForStop(ctx, httpStopped, scrub)
	log.Info().Msg("shutting down")
	_, _ = sd.Notify(sddaemon.SdNotifyStopping)
	if !errors.Is(stopErr, raftnode.ErrStorageStalled) {
		// A hand-over needs raft's leader loop and a commit, which
		// stalled storage holds: stopping raft is what lets the other
		// voter be elected.
		d.handOver()
	}
	cancel()
	if httpServer != nil {
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = httpServer.ShutdownWithContext(sctx) // requests still open after 2 s end with the process
		scancel()
	}
	grpcServer.Stop()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := node.Shutdown(sctx); err != nil {
		log.Warn().Err(err).Msg("raft shutdown")
	}
	d.parts.Wait()
	log.Info().Msg("stopped")
	return stopErr
}

// startHTTP serves health, metrics, the status page and the enqueue
// endpoint on the HTTP listener, if the node config names one (nil server
// otherwise). The channel reports the server ending on its own: the node
// can no longer answer its health checks or producers, so it steps down.
func (d *daemon) startHTTP(srv *control.Server, sfHTTP fasthttp.RequestHandler, bodies *netguard.BodyBudget) (*fasthttp.Server, <-chan error, error) {
	cfg := d.cfg
	httpStopped := make(chan error, 1)
	if cfg.HTTP.Listen == "" {
		return nil, httpStopped, nil
	}
	ready := func() (bool, string) {
		st := d.roles.Current()
		if st.Role == role.Detached {
			return false, "no cluster contact"
		}
		return true, ""
	}
	gate := &httpgate.Gate{Insecure: cfg.HTTP.Insecure, MetricsOpen: cfg.HTTP.MetricsOpen, Now: time.Now,
		Tokens: func(hash [32]byte) (httpgate.Token, bool) {
			t, ok := d.state.Access().Token(hash)
			return httpgate.Token{Name: t.Name, Targets: t.Targets, Expires: t.Expires}, ok
		},
		Revoked: func(c *x509.Certificate) bool {
			acc := d.state.Access()
			return len(acc.Revoked) > 0 && acc.IsRevoked(pki.SerialHex(c))
		}}
	mux := healthMux(d.acting, ready, d.reg, cfg.HTTP.Pprof)
	page := d.newConsole(srv)
	d.run("console", page.Run)
	mux.Handle("/", page.Handler())
	httpServer := newHTTPServer(mux, sfHTTP, gate, bodies, d.log)
	if err := registerHTTPInsecure(d.reg, cfg.HTTP.Insecure); err != nil {
		return nil, nil, err
	}
	// The bounds count TCP connections, under the TLS listener: a
	// handshake that never ends holds its descriptor too.
	guarded, err := guardedListen(d.reg, d.log, "http", cfg.HTTP.Listen, d.budgets.http)
	if err != nil {
		return nil, nil, err
	}
	var httpLis net.Listener = guarded
	if cfg.HTTP.Insecure {
		d.log.Warn().Str("http", cfg.HTTP.Listen).Msg("http.insecure: the HTTP listener serves plain HTTP and anyone who reaches it may enqueue to every target; for labs only")
	} else {
		httpLis = d.peerConns.Listener(tls.NewListener(guarded, httpTLS(d.serverTLS)))
	}
	d.run("http", func(ctx context.Context) error {
		err := httpServer.Serve(httpLis)
		if ctx.Err() == nil {
			httpStopped <- fmt.Errorf("http server on %s stopped: %v", cfg.HTTP.Listen, err)
		}
		return err
	})
	return httpServer, httpStopped, nil
}

// waitForStop waits until ctx ends, the HTTP server stops on its own, the
// state storage or the raft log fails (a damaged state file the scrubber
// can rebuild from the cluster is no reason to stop), or storage stalls,
// and says why it stopped.
func (d *daemon) waitForStop(ctx context.Context, httpStopped <-chan error, scrub *integrity.Scrubber) error {
	var stopErr error
	logFailed := watchFailure(d.runCtx, d.node.LogFailure)
	storageStalled := watchFailure(d.runCtx, lasting(stallConfirm, time.Now, func() error { return d.node.StorageStalled(storageStallLimit) }))
wait:
	for {
		select {
		case <-ctx.Done():
		case stopErr = <-httpStopped:
			// A node whose health checks and producers cannot reach it must
			// not stay Active: hand the role over and exit; the service
			// manager restarts it with a new listener.
			d.log.Error().Err(stopErr).Msg("the HTTP listener stopped; stepping down and stopping so the service manager restarts scadad")
		case err := <-logFailed:
			// The raft log's background write failed: raft believes
			// entries are stored that are not, so this process appends
			// nothing more (raftnode's parallelLog). Exit so the service
			// manager restarts it; on start it reads its log from disk, and
			// the leader sends it what it lacks.
			stopErr = fmt.Errorf("raft log storage failed: %w", err)
			d.log.Error().Err(err).Msg("raft log write failed; stopping so the service manager restarts scadad once the disk is writable again")
		case err := <-storageStalled:
			// A raft log write, an apply or a snapshot has hung (a disk that
			// stopped answering). As the leader this node would keep the Active
			// role without committing or applying anything, its heartbeats
			// holding off every election; as a follower it stores nothing. Exit
			// so the other voter is elected and the service manager restarts
			// this one; the stop must not wait for the write that hangs.
			stopErr = err
			d.log.Error().Err(err).Dur("limit", storageStallLimit).
				Msg("storage stalled; stopping so the other voter takes over and the service manager restarts scadad")
			exitAfter(stallExitGrace, d.log)
		case err := <-watchFailure(d.runCtx, d.state.Err):
			// A damaged state file (bbolt panicked on a page) is rebuilt
			// from the cluster where a majority can lead without it.
			if errors.Is(err, fsm.ErrDamagedState) && scrub.Rebuild(d.runCtx, err) {
				continue
			}
			stopErr = fmt.Errorf("state storage failed: %w", err)
			// The FSM stopped applying (a full or failing disk): this node
			// can neither apply nor serve its state any more. Exit so the
			// service manager restarts it; on start it replays from its own
			// applied index, which succeeds once the disk has room again.
			// Everything acknowledged is in the Raft logs of a quorum.
			d.log.Error().Err(err).Msg("state storage failed; stopping so the service manager restarts scadad once the disk is writable again")
		}
		break wait
	}
	return stopErr
}

// storageStallLimit is how long a raft log write, an apply or a snapshot may
// run before the node stops (raftnode.StorageStalled). No healthy one comes
// near it: the longest hold is the hourly scrub's bbolt check, about 0.4 s a
// GiB of state.
const storageStallLimit = 30 * time.Second

// stallConfirm is how long a stall must go on being seen before the node
// stops on it: a write in progress when the process was paused (SIGSTOP,
// a VM stall) looks overdue on waking until it returns, which it then
// does at once.
const stallConfirm = 2 * time.Second

// lasting is failed that reports an error only once every look has found
// one for at least d (watchFailure looks every 250 ms).
func lasting(d time.Duration, now func() time.Time, failed func() error) func() error {
	var since time.Time
	return func() error {
		err := failed()
		if err == nil {
			since = time.Time{}
			return nil
		}
		if since.IsZero() {
			since = now()
		}
		if now().Sub(since) < d {
			return nil
		}
		return err
	}
}

// stallExitGrace bounds the stop after stalled storage: closing the
// stores waits for the write that hangs.
const stallExitGrace = 10 * time.Second

// exitAfter ends the process with status 1 if it has not ended within
// grace, for a stop that storage which does not answer could hold up.
func exitAfter(grace time.Duration, log zerolog.Logger) {
	time.AfterFunc(grace, func() {
		log.Error().Dur("grace", grace).Msg("the stop did not finish in time (storage does not answer); exiting")
		os.Exit(1)
	})
}

// handOver hands the Active role over before a planned stop.
func (d *daemon) handOver() {
	// A planned stop of the Active node hands the role over first, so the
	// standby takes over at once instead of after an election timeout. A
	// sole voter has no one to hand it to.
	// In pair mode the peer would be left one voter of two, without
	// quorum, until override_after: the Active leaves the voters too.
	if st := d.roles.Current(); st.Role == role.Active && st.Voters == 1 {
		d.log.Info().Msg("sole voter: no other node to hand the Active role to")
	} else if (st.Role == role.Active || st.Role == role.Standby) && d.cfg.Cluster.Mode == string(raftnode.ModePair) {
		lctx, lcancel := context.WithTimeout(context.Background(), 3*time.Second)
		actx, acancel := context.WithTimeout(lctx, time.Second)
		if st.Role == role.Active {
			if err := d.fwd.Audit(actx, d.cfg.NodeID, "failover", "shutdown of "+d.cfg.NodeID+": handing the Active role over and leaving the voters"); err != nil {
				d.log.Warn().Err(err).Msg("failover audit entry before shutdown not recorded")
			}
		}
		acancel()
		if err := d.node.LeaveVoters(lctx); err != nil {
			d.log.Warn().Err(err).Msg("planned stop: the peer may be without an Active until override_after")
		}
		lcancel()
	} else if st.Role == role.Active {
		tctx, tcancel := context.WithTimeout(context.Background(), 3*time.Second)
		// The next leader's leader.elected entry then says planned failover.
		actx, acancel := context.WithTimeout(tctx, time.Second)
		if err := d.fwd.Audit(actx, d.cfg.NodeID, "failover", "shutdown of "+d.cfg.NodeID+": handing the Active role over"); err != nil {
			d.log.Warn().Err(err).Msg("failover audit entry before shutdown not recorded")
		}
		acancel()
		if err := d.node.LeadershipTransfer(tctx, ""); err != nil {
			d.log.Warn().Err(err).Msg("leadership transfer before shutdown failed; the peer will elect itself")
		}
		tcancel()
	}
}

// watchFailure reports the storage failure failed returns (the FSM's
// state file, the raft log) once it happens.
func watchFailure(ctx context.Context, failed func() error) <-chan error {
	out := make(chan error, 1)
	go everyTick(ctx, 250*time.Millisecond, func() bool {
		if err := failed(); err != nil {
			out <- err
			return false
		}
		return true
	})
	return out
}

// withRecovery adds to an error about a damaged file what the operator
// can do about it.
func withRecovery(err error) error {
	switch {
	case errors.Is(err, fsm.ErrDamagedState):
		return fmt.Errorf("%w. The state file is derived from raft: move it aside and start scadad again to rebuild it from the raft snapshots and log, or restore a backup (scadactl snapshot restore)", err)
	case errors.Is(err, raftnode.ErrDamagedLog), errors.Is(err, raftnode.ErrDamagedSnapshot):
		return fmt.Errorf("%w. Move this node's raft folder aside and start scadad again: it rejoins and the leader sends it a snapshot (with no healthy peer, restore a backup with scadactl snapshot restore)", err)
	}
	return err
}

// openState opens the FSM's state file. Its commits are not fsynced (the
// raft log is), so a file the OS may have lost writes of, after a power
// loss or a kernel crash, is discarded: raft then restores the newest
// snapshot and replays the log after it.
func openState(path string, cpuShare float64, log zerolog.Logger) (*fsm.FSM, error) {
	opts := fsm.Options{Logger: log.With().Str("part", "fsm").Logger(), DeferSync: true, ReleasePages: mappedPages,
		DigestCPUShare: cpuShare,
		CommitBytes:    stateCommitBytes}
	state, err := fsm.Open(path, opts)
	if !errors.Is(err, fsm.ErrUnsyncedState) {
		return state, err
	}
	log.Warn().Err(err).Str("path", path).
		Msg("state file not trusted after an OS restart; discarding it to rebuild it from the raft snapshot and log")
	if err := fsm.DiscardState(path); err != nil {
		return nil, err
	}
	return fsm.Open(path, opts)
}
