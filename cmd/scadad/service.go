package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/scadad/scadad/nodeconfig"
	"github.com/scadad/scadad/winsvc"
)

// serviceEnv is what `scadad service` needs of the machine: the control
// manager, this binary's path and how a path is made absolute (the
// tests give Windows ones on any platform).
type serviceEnv struct {
	manager func() (winsvc.Manager, error)
	exe     func() (string, error)
	abs     func(string) (string, error)
}

func osServiceEnv() serviceEnv {
	return serviceEnv{manager: winsvc.NewManager, exe: os.Executable, abs: filepath.Abs}
}

const serviceUsage = `usage: scadad service install --config FILE   register scadad (automatic start, restart after 5 s, 30 s, 60 s) and its Event Log source
       scadad service start [--timeout D]      start it and wait until it runs
       scadad service stop [--timeout D]       stop it (the Active hands its role over) and wait until it stopped
       scadad service uninstall [--timeout D]  stop it and unregister it and its Event Log source
       scadad service recovery                 set the restarts after 5 s, 30 s, 60 s on the registered service (the MSI runs it) and read them back`

// runServiceCommand is `scadad service install|uninstall|start|stop|recovery`.
func runServiceCommand(args []string, stdout, stderr io.Writer, env serviceEnv) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, serviceUsage)
		return 2
	}
	verb := args[0]
	fs := flag.NewFlagSet("scadad service "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "node config file the service starts with (install)")
	timeout := fs.Duration("timeout", 90*time.Second, "how long start, stop and uninstall wait for the service")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "scadad service %s: unexpected %q\n%s\n", verb, fs.Arg(0), serviceUsage)
		return 2
	}
	switch verb {
	case "install", "uninstall", "start", "stop", "recovery":
	default:
		fmt.Fprintf(stderr, "scadad service: %q is not install, uninstall, start, stop or recovery\n%s\n", verb, serviceUsage)
		return 2
	}
	if verb != "install" && *configPath != "" {
		fmt.Fprintf(stderr, "scadad service %s: --config is for install (the registered service keeps its own)\n", verb)
		return 2
	}
	m, err := env.manager()
	if err != nil {
		fmt.Fprintf(stderr, "scadad service %s: %v\n", verb, err)
		return 1
	}
	cmds := winsvc.Commands{Manager: m, Warn: func(msg string) { fmt.Fprintf(stderr, "scadad service %s: warning: %s\n", verb, msg) }}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	name := winsvc.DefaultName
	switch verb {
	case "install":
		err = installService(cmds, env, *configPath)
	case "start":
		err = cmds.Start(ctx, name)
	case "stop":
		err = cmds.Stop(ctx, name)
	case "uninstall":
		err = cmds.Uninstall(ctx, name)
	case "recovery":
		err = cmds.SetRecovery(name)
	}
	if err != nil {
		fmt.Fprintf(stderr, "scadad service %s: %v\n", verb, err)
		return 1
	}
	fmt.Fprintf(stdout, "scadad service %s: done\n", verb)
	return 0
}

// installService registers this binary with configPath, once the config
// has been read as the service will read it: a service that cannot start
// is better refused here than found in the Event Log.
func installService(cmds winsvc.Commands, env serviceEnv, configPath string) error {
	if configPath == "" {
		return errors.New("--config FILE is required (the node config the service starts with)")
	}
	abs, err := env.abs(configPath)
	if err != nil {
		return fmt.Errorf("--config %s: %w", configPath, err)
	}
	if _, err := nodeconfig.Load(configPath); err != nil {
		return fmt.Errorf("the service would not start: %w", err)
	}
	exe, err := env.exe()
	if err != nil {
		return fmt.Errorf("path of scadad.exe: %w", err)
	}
	spec, err := winsvc.NewSpec(exe, abs)
	if err != nil {
		return err
	}
	return cmds.Install(spec)
}
