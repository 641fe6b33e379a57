package winsvc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// State is a service's state as the control manager reports it.
type State int

// The states the commands wait for; the control manager's others
// (pause and continue pending, paused) scadad never enters.
const (
	Stopped State = iota + 1
	StartPending
	StopPending
	Running
	OtherState
)

func (s State) String() string {
	switch s {
	case Stopped:
		return "stopped"
	case StartPending:
		return "start pending"
	case StopPending:
		return "stop pending"
	case Running:
		return "running"
	}
	return "in another state"
}

// Status is a query's answer: the state and, once stopped, the exit code
// the service reported (0 for a clean stop).
type Status struct {
	State    State
	ExitCode uint32
}

// ErrNotInstalled is returned (wrapped) when no service of the name is
// registered.
var ErrNotInstalled = errors.New("service not installed")

// ErrExists is returned (wrapped) by Create when the service is already
// registered.
var ErrExists = errors.New("service already installed")

// ErrNonCrashRecoveryRefused is returned (wrapped) by Create when the
// service is registered with its recovery actions but the control manager
// refused to apply them on a non-zero exit too (Wine's does; Windows
// takes it since Vista): a crash is restarted, a fatal exit is not.
var ErrNonCrashRecoveryRefused = errors.New("the control manager does not apply the recovery actions on a non-zero exit")

// Manager is the part of the Windows service control manager the
// commands use (scm_windows.go; a fake in the tests).
type Manager interface {
	// Create registers the service (start type automatic, the recovery
	// actions of spec, also on a non-zero exit) and its Event Log source.
	Create(spec Spec) error
	// Delete unregisters the service and its Event Log source.
	Delete(name string) error
	Start(name string) error
	// Stop sends the stop request; it does not wait.
	Stop(name string) error
	Query(name string) (Status, error)
	// SetRecovery sets the recovery actions of the registered service
	// name (ErrNonCrashRecoveryRefused, wrapped, as Create).
	SetRecovery(name string, r Recovery) error
	// Recovery reads back what the control manager stored as the
	// service's recovery actions.
	Recovery(name string) (Recovery, error)
}

// Recovery is what the control manager does when the service exits
// without being asked to, as it reports it.
type Recovery struct {
	// Restarts are the restart delays of the first, second and every
	// later failure.
	Restarts   []time.Duration
	ResetAfter time.Duration
	// OnNonZeroExit: a non-zero exit counts as a failure too.
	OnNonZeroExit bool
}

// Commands carries out `scadad service install|uninstall|start|stop`
// through a Manager, waiting for the state each asks for.
type Commands struct {
	Manager Manager
	// Poll is how often a wait queries the state.
	Poll time.Duration
	// Warn gets what did not stop a command but the operator must know.
	Warn func(string)
}

// Install registers spec, then reads the recovery actions back from the
// control manager: one that stored none, or other ones, is warned about
// with the sc.exe lines that set them (Wine's control manager stores
// none).
func (c Commands) Install(spec Spec) error {
	err := c.Manager.Create(spec)
	switch {
	case errors.Is(err, ErrNonCrashRecoveryRefused):
		c.warn(fmt.Sprintf("service %s installed, but %v; scadad is restarted after a crash, not after a fatal error's exit", spec.Name, err))
	case errors.Is(err, ErrExists):
		return fmt.Errorf("install service %s: it is installed already; `scadad service uninstall` first to change it: %w", spec.Name, err)
	case err != nil:
		return fmt.Errorf("install service %s: %w", spec.Name, err)
	}
	c.checkRecovery(spec.Name, spec.wantedRecovery(), err == nil)
	return nil
}

// SetRecovery sets the default recovery actions on the registered service
// name and reads them back: for a service registered by something else
// (the MSI, whose wixl cannot set them, runs `scadad service recovery`).
func (c Commands) SetRecovery(name string) error {
	want := Recovery{Restarts: DefaultRecovery, ResetAfter: DefaultResetAfter, OnNonZeroExit: true}
	err := c.Manager.SetRecovery(name, want)
	switch {
	case errors.Is(err, ErrNonCrashRecoveryRefused):
		c.warn(fmt.Sprintf("service %s: %v; scadad is restarted after a crash, not after a fatal error's exit", name, err))
	case err != nil:
		return fmt.Errorf("set the recovery actions of service %s: %w", name, err)
	}
	c.checkRecovery(name, want, err == nil)
	return nil
}

// checkRecovery warns when the control manager does not report the
// recovery actions want for service name. flagTaken: the non-zero-exit
// flag was set without an error, so it must read back set.
func (c Commands) checkRecovery(name string, want Recovery, flagTaken bool) {
	fix := strings.Join(FailureCommands(name, want), " and ")
	got, err := c.Manager.Recovery(name)
	if err != nil {
		c.warn(fmt.Sprintf("service %s: its recovery actions cannot be read back (%v): check them with `sc.exe qfailure %s`, and if they are missing set them with %s", name, err, name, fix))
		return
	}
	if !slices.Equal(got.Restarts, want.Restarts) || got.ResetAfter != want.ResetAfter {
		c.warn(fmt.Sprintf("service %s: the control manager stored the recovery actions %v (failures reset after %v), not restarts after %v (reset after %v): set them with %s", name, got.Restarts, got.ResetAfter, want.Restarts, want.ResetAfter, fix))
		return
	}
	if flagTaken && want.OnNonZeroExit && !got.OnNonZeroExit {
		c.warn(fmt.Sprintf("service %s: the control manager does not apply its recovery actions on a non-zero exit: set it with %s", name, fix))
	}
}

// FailureCommands are the sc.exe lines that set r on service name by
// hand: the replaced system's `sc.exe failure` line and the flag that
// makes a non-zero exit count as a failure.
func FailureCommands(name string, r Recovery) []string {
	actions := make([]string, len(r.Restarts))
	for i, d := range r.Restarts {
		actions[i] = fmt.Sprintf("restart/%d", d.Milliseconds())
	}
	return []string{
		fmt.Sprintf("`sc.exe failure %s reset= %d actions= %s`", name, int64(r.ResetAfter.Seconds()), strings.Join(actions, "/")),
		fmt.Sprintf("`sc.exe failureflag %s 1`", name),
	}
}

// Start starts the service and waits until it runs. A service that stops
// again during its start (a bad config, a port in use) is reported with
// its exit code and where its reason was written.
func (c Commands) Start(ctx context.Context, name string) error {
	if err := c.Manager.Start(name); err != nil {
		return fmt.Errorf("start service %s: %w", name, err)
	}
	st, err := c.waitFor(ctx, name, func(s Status) bool { return s.State == Running || s.State == Stopped })
	if err != nil {
		return fmt.Errorf("start service %s: %w", name, err)
	}
	if st.State == Stopped {
		return fmt.Errorf("start service %s: it stopped during its start with exit code %d; the reason is in the Event Log (source %s) and the log file in the data dir", name, st.ExitCode, name)
	}
	return nil
}

// Stop asks the service to stop and waits until it has: a planned stop
// hands the Active role over first. A service already stopped is no error.
func (c Commands) Stop(ctx context.Context, name string) error {
	st, err := c.Manager.Query(name)
	if err != nil {
		return fmt.Errorf("stop service %s: %w", name, err)
	}
	if st.State == Stopped {
		return nil
	}
	if st.State != StopPending {
		if err := c.Manager.Stop(name); err != nil {
			return fmt.Errorf("stop service %s: %w", name, err)
		}
	}
	if _, err := c.waitFor(ctx, name, func(s Status) bool { return s.State == Stopped }); err != nil {
		return fmt.Errorf("stop service %s: %w", name, err)
	}
	return nil
}

// Uninstall stops the service if it runs, then unregisters it and its
// Event Log source.
func (c Commands) Uninstall(ctx context.Context, name string) error {
	if err := c.Stop(ctx, name); err != nil {
		return fmt.Errorf("uninstall: %w", err)
	}
	if err := c.Manager.Delete(name); err != nil {
		return fmt.Errorf("uninstall service %s: %w", name, err)
	}
	return nil
}

func (c Commands) warn(msg string) {
	if c.Warn != nil {
		c.Warn(msg)
	}
}

// waitFor queries the service every Poll until done says so or ctx ends.
func (c Commands) waitFor(ctx context.Context, name string, done func(Status) bool) (Status, error) {
	poll := c.Poll
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		st, err := c.Manager.Query(name)
		if err != nil {
			return st, err
		}
		if done(st) {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("still %s: %w", st.State, ctx.Err())
		case <-t.C:
		}
	}
}
