package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/scadad/scadad/internal/version"
	"github.com/scadad/scadad/nodeconfig"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("scadad", flag.ContinueOnError)
	configPath := fs.String("config", "", "node config file (YAML)")
	dev := fs.Bool("dev", false, "run a one-node site on its embedded default: own data folder, generated certificates, fixed loopback ports")
	devDir := fs.String("dev-dir", "scadad-dev", "data folder for --dev")
	showVersion := fs.Bool("version", false, "print the version and exit")
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
	var cfg *nodeconfig.Config
	var err error
	switch {
	case *dev && *configPath != "":
		fmt.Fprintln(os.Stderr, "scadad: --dev and --config exclude each other")
		return 2
	case *dev:
		cfg, err = devConfig(*devDir)
	case *configPath != "":
		cfg, err = nodeconfig.Load(*configPath)
	default:
		fmt.Fprintln(os.Stderr, "scadad: pass --config FILE, or --dev for a one-node site on the embedded default")
		return 2
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "scadad: %v\n", err)
		return 1
	}
	if underServiceManager() {
		return runAsService(func(ctx context.Context) error { return runDaemon(ctx, cfg) })
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dumpStacksOnSignal(ctx, os.Stderr)
	if err := runDaemon(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "scadad: %v\n", err)
		return 1
	}
	return 0
}
