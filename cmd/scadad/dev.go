package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/deploy"
	"github.com/scadad/scadad/gateway/sim"
	"github.com/scadad/scadad/internal/devsite"
	"github.com/scadad/scadad/internal/grpcdial"
	"github.com/scadad/scadad/nodeconfig"
	"github.com/scadad/scadad/pki"
	"github.com/scadad/scadad/siteconfig"
)

// runDev runs the whole demo site of layout in this process until ctx
// ends: the gateway simulator, the recording sink, every node, and the
// demo site config deployed once a leader is elected. What to try next
// goes to guide.
func runDev(ctx context.Context, layout devsite.Layout, guide io.Writer, out logOutputs) error {
	if err := portsFree(layout); err != nil {
		return err
	}
	cfgs, err := layout.Configs()
	if err != nil {
		return err
	}
	artifact := layout.SiteConfig()
	site, err := siteconfig.Parse(artifact)
	if err != nil {
		return fmt.Errorf("the demo site config: %w", err)
	}
	log, err := newLogger(formatted(out.stderr, "console"), "info", "dev")
	if err != nil {
		return err
	}

	nodeLogs := make([]zerolog.Logger, len(cfgs))
	for i, cfg := range cfgs {
		nodeLog, closeLog, err := openLog(cfg, out)
		if err != nil {
			return err
		}
		defer func() { _ = closeLog() }()
		nodeLogs[i] = nodeLog
	}

	gw := sim.New(sim.Config{Name: "scadad-dev gateway", ChangeInterval: time.Second, Kinds: sim.KindsOf(site),
		Logger: log.With().Str("part", "gateway-sim").Logger()})
	if _, err := gw.Start(layout.GatewayAddr()); err != nil {
		return fmt.Errorf("the demo's gateway simulator: %w", err)
	}
	defer gw.Stop()

	sink, err := devsite.OpenSink(layout.SinkRecord(), time.Now)
	if err != nil {
		return err
	}
	defer sink.Close()
	sinkLis, err := net.Listen("tcp", layout.SinkAddr())
	if err != nil {
		return fmt.Errorf("the demo's recording sink: %w", err)
	}
	sinkServer := &http.Server{Handler: sink, ReadHeaderTimeout: 5 * time.Second}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := sinkServer.Serve(sinkLis); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("the demo's recording sink: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return sinkServer.Shutdown(sctx)
	})
	for i, cfg := range cfgs {
		g.Go(func() error {
			if err := runDaemon(gctx, cfg, nodeLogs[i]); err != nil {
				return fmt.Errorf("node %s: %w", cfg.NodeID, err)
			}
			return nil
		})
	}
	g.Go(func() error {
		if err := deployDemo(gctx, layout, artifact, log.With().Str("part", "dev").Logger()); err != nil {
			if gctx.Err() != nil {
				return nil
			}
			return err
		}
		printDevGuide(guide, layout, cfgs)
		return nil
	})
	return g.Wait()
}

// portsFree names every port of the layout another process holds, so one
// message says what to do instead of one part after another failing.
func portsFree(layout devsite.Layout) error {
	var taken []string
	for what, addr := range layout.Addrs() {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			taken = append(taken, fmt.Sprintf("%s %s", what, addr))
			continue
		}
		l.Close()
	}
	if len(taken) > 0 {
		slices.Sort(taken)
		return fmt.Errorf("--dev: in use by another process: %s; stop it (the quick start's node-a uses the same ports) or pass --dev-port-base", strings.Join(taken, ", "))
	}
	return nil
}

// deployDemo pushes the demo site config through the control API, as an
// operator would, once a leader takes it. A site config already deployed
// (an earlier run, or the operator's own) is kept.
func deployDemo(ctx context.Context, layout devsite.Layout, artifact []byte, log zerolog.Logger) error {
	certs := layout.CertsDir()
	conf, err := pki.LoadClientTLS(filepath.Join(certs, "ca.crt"), filepath.Join(certs, devsite.Operator+".crt"), filepath.Join(certs, devsite.Operator+".key"))
	if err != nil {
		return fmt.Errorf("deploy the demo site: operator certificate: %w", err)
	}
	conn, err := grpc.NewClient(layout.APIAddrs()[0], grpcdial.ControlAPI(conf)...)
	if err != nil {
		return fmt.Errorf("deploy the demo site: %w", err)
	}
	defer conn.Close()
	api := controlpb.NewControlClient(conn)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := api.DeployPush(cctx, &controlpb.DeployPushRequest{Target: deploy.DefaultTarget, Artifact: artifact,
			HasExpectRevision: true, ExpectRevision: 0, Message: "scadad --dev: the demo site"})
		cancel()
		switch status.Code(err) {
		case codes.OK:
			log.Info().Uint64("revision", resp.GetRevision()).Msg("demo site config deployed")
			return nil
		case codes.FailedPrecondition:
			log.Info().Msg("a site config is already deployed in this dev folder; keeping it (remove the folder to start from the demo again)")
			return nil
		case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated:
			return fmt.Errorf("deploy the demo site: %w", err)
		}
		// No leader yet, or the node is still starting.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// printDevGuide says where everything is and what to try.
func printDevGuide(w io.Writer, layout devsite.Layout, cfgs []*nodeconfig.Config) {
	certs := layout.CertsDir()
	var ua []string
	for _, m := range layout.Members() {
		if m.OPCUA != "" {
			ua = append(ua, m.OPCUA)
		}
	}
	fmt.Fprintf(w, `
scadad --dev: %d node(s), the demo site deployed. In another shell:

  export SCADACTL_ENDPOINTS=%s SCADACTL_CERTS=%s
  scadactl status
  scadactl sf enqueue %s --data '{"v":1}'     # lands in %s
  scadactl opcua watch %s "ns=2;s=Pump1.Speed"
  curl --cacert %s https://%s/health/active
  status page: https://%s/ in a browser on this machine (the node's certificate is signed by %s)

Ctrl-C stops everything.
`, len(cfgs), strings.Join(layout.APIAddrs(), ","), certs, devsite.HistoryTarget, layout.SinkRecord(),
		strings.Join(ua, ","), filepath.Join(certs, "ca.crt"), layout.HTTPAddr(0), layout.HTTPAddr(0), filepath.Join(certs, "ca.crt"))
}
