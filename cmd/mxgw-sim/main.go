// Command mxgw-sim runs the MxAccess gateway simulator (package gateway/sim)
// as a process, for the demo and for manual storm experiments. Fault
// injection and counters are on a small HTTP admin interface:
//
//	mxgw-sim -listen 127.0.0.1:5001 -admin 127.0.0.1:5002 -caps old -cost 120ms
//	mxgw-sim -site configs/site-local.yaml   # each tag sends its attribute's type
//	curl -X POST '127.0.0.1:5002/wedge?for=60s'
//	curl 127.0.0.1:5002/stats
//	curl -X POST '127.0.0.1:5002/alarms/raise?id=A1&source=Z28061&severity=700&condition=HiLevel'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/gateway/sim"
	"github.com/scadad/scadad/internal/tty"
	"github.com/scadad/scadad/siteconfig"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mxgw-sim:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mxgw-sim", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:5001", "gRPC gateway address")
	admin := fs.String("admin", "127.0.0.1:5002", "HTTP admin address (empty disables)")
	caps := fs.String("caps", "new", "capability set: old (incident-era) or new (adds bulk-subscribe-supervisory)")
	deadline := fs.Duration("deadline", 30*time.Second, "default per-command deadline")
	maxTimeout := fs.Duration("max-command-timeout", 0, "clamp for a session's requested command timeout (0 = none)")
	cost := fs.Duration("cost", 0, "apartment time per command")
	perTag := fs.Duration("per-tag-cost", 0, "apartment time per tag or item in bulk commands")
	change := fs.Duration("change", time.Second, "value change interval per advised item (0 = none)")
	skipAbandoned := fs.Bool("skip-abandoned", false, "skip commands whose caller already gave up (the real STA does not)")
	badPrefix := fs.String("bad-tag-prefix", "", "tags with this prefix fail to add")
	alarmScript := fs.String("alarm-script", "", "file with an alarm schedule played from the start (see sim.ParseAlarmScript)")
	sitePath := fs.String("site", "", "site config (YAML) whose attribute types the simulated tags take; without it every tag is a Double")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var kinds map[string]sim.Kind
	if *sitePath != "" {
		data, err := os.ReadFile(*sitePath)
		if err != nil {
			return fmt.Errorf("-site: %w", err)
		}
		site, err := siteconfig.Parse(data)
		if err != nil {
			return fmt.Errorf("-site %s: %w", *sitePath, err)
		}
		kinds = sim.KindsOf(site)
	}
	var capSet []string
	switch *caps {
	case "old":
		capSet = sim.OldCapabilities()
	case "new":
		capSet = sim.NewCapabilities()
	default:
		return fmt.Errorf("-caps must be old or new, not %q", *caps)
	}
	var steps []sim.AlarmStep
	if *alarmScript != "" {
		text, err := os.ReadFile(*alarmScript)
		if err != nil {
			return fmt.Errorf("-alarm-script: %w", err)
		}
		if steps, err = sim.ParseAlarmScript(string(text)); err != nil {
			return fmt.Errorf("-alarm-script %s: %w", *alarmScript, err)
		}
	}
	log := newLogger(os.Stderr)
	s := sim.New(sim.Config{
		Capabilities: capSet, DefaultCommandTimeout: *deadline, MaxCommandTimeout: *maxTimeout,
		CommandCost: *cost, PerTagCost: *perTag, ChangeInterval: *change,
		SkipAbandoned: *skipAbandoned, BadTagPrefix: *badPrefix, Kinds: kinds, Logger: log,
	})
	addr, err := s.Start(*listen)
	if err != nil {
		return err
	}
	defer s.Stop()
	log.Info().Str("gateway", addr).Str("caps", *caps).Dur("deadline", *deadline).Msg("mxgw-sim serving")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(steps) > 0 {
		go s.RunAlarmScript(ctx, steps)
	}
	if *admin != "" {
		srv := &http.Server{Addr: *admin, Handler: s.AdminHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error().Err(err).Msg("admin server")
				stop()
			}
		}()
		defer srv.Close()
		log.Info().Str("admin", *admin).Msg("admin interface serving")
	}
	<-ctx.Done()
	return nil
}

// newLogger writes readable lines to w, coloured only on a terminal: a log
// file or a pipe gets no escape codes.
func newLogger(w io.Writer) zerolog.Logger {
	return zerolog.New(zerolog.ConsoleWriter{Out: w, NoColor: !tty.Is(w)}).With().Timestamp().Logger()
}
