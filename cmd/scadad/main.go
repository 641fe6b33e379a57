package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/devsite"
	"github.com/scadad/scadad/internal/version"
	"github.com/scadad/scadad/nodeconfig"
	"github.com/scadad/scadad/winsvc"
)

func main() {
	// Milliseconds: a failover is told apart from a slow one, and a node's
	// log lined up against its peers', only below the second.
	zerolog.TimeFieldFormat = logTimeFormat
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "service" {
		return runServiceCommand(args[1:], os.Stdout, os.Stderr, osServiceEnv())
	}
	fs := flag.NewFlagSet("scadad", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: scadad --config FILE | --dev | --version\n       scadad service install|uninstall|start|stop (Windows)")
		fs.PrintDefaults()
	}
	configPath := fs.String("config", "", "node config file (YAML)")
	dev := fs.Bool("dev", false, "run the whole demo site in this process: a gateway simulator, a recording sink, the nodes, the demo site config deployed, on loopback")
	devDir := fs.String("dev-dir", "scadad-dev", "data folder for --dev: certificates, node data, sink.jsonl")
	devNodes := fs.Int("nodes", 1, "with --dev: 1 (one voter) or 3 (two voters and a witness)")
	devBase := fs.Int("dev-port-base", devsite.DefaultBase, "with --dev: the ports are this plus 1.. (Raft), 101.. (control API), 201.. (HTTP), 301.. (OPC UA), 401 (gateway), 402 (sink)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	asService := fs.Bool("service", false, "run under the Windows service control manager (scadad service install registers it so)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Println("scadad", version.Get())
		return 0
	}
	// Under the Windows service manager stderr goes nowhere: what stops
	// the start goes to the Event Log, the rest to the log file too.
	out := logOutputs{stderr: os.Stderr}
	if *asService && runtime.GOOS != "windows" {
		fmt.Fprintln(os.Stderr, "scadad: --service is for the Windows service control manager; systemd runs scadad as a plain process")
		return 2
	}
	if *asService || winsvc.UnderServiceManager() {
		events, closeEvents, err := winsvc.OpenEventLog(winsvc.DefaultName)
		if err != nil {
			// Registered by hand (sc create) without the source: the log
			// file still has everything.
			events, closeEvents = winsvc.Discard{}, func() error { return nil }
		}
		defer func() { _ = closeEvents() }()
		out = logOutputs{events: events}
	}
	fail := func(code int, err error) int {
		if out.stderr != nil {
			fmt.Fprintf(out.stderr, "scadad: %v\n", err)
		} else {
			_ = out.events.Error(winsvc.EventFatal, "scadad did not start: "+err.Error())
		}
		return code
	}
	var cfg *nodeconfig.Config
	var err error
	switch {
	case *dev && *configPath != "":
		return fail(2, errors.New("--dev and --config exclude each other"))
	case *dev:
		return runDevCommand(devsite.Layout{Dir: *devDir, Base: *devBase, Nodes: *devNodes}, out, fail)
	case *configPath != "":
		cfg, err = nodeconfig.Load(*configPath)
	default:
		return fail(2, errors.New("pass --config FILE, or --dev for the demo site on the embedded default"))
	}
	if err != nil {
		return fail(1, err)
	}
	log, closeLog, err := openLog(cfg, out)
	if err != nil {
		return fail(1, err)
	}
	defer func() { _ = closeLog() }()
	if out.stderr == nil {
		about := fmt.Sprintf("%s, node %s, config %s", version.Get(), cfg.NodeID, *configPath)
		return winsvc.Run(winsvc.DefaultName, func(ctx context.Context) error { return runDaemon(ctx, cfg, log) }, out.events, about)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dumpStacksOnSignal(ctx, os.Stderr)
	if err := runDaemon(ctx, cfg, log); err != nil {
		return fail(1, err)
	}
	return 0
}

// runDevCommand runs the demo site in a terminal until SIGINT or SIGTERM.
func runDevCommand(layout devsite.Layout, out logOutputs, fail func(int, error) int) int {
	if err := layout.Check(); err != nil {
		return fail(2, err)
	}
	if out.stderr == nil {
		return fail(2, errors.New("--dev is a demo for a terminal, not for a service manager: install the service with a node config"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dumpStacksOnSignal(ctx, os.Stderr)
	if err := runDev(ctx, layout, os.Stdout, out); err != nil {
		return fail(1, err)
	}
	return 0
}
