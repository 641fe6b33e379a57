package winsvc

import (
	"context"
	"errors"
	"fmt"
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

// Install registers spec. An installed service is left as it is (the
// error says how to replace it).
func (c Commands) Install(spec Spec) error {
	if err := c.Manager.Create(spec); err != nil {
		if errors.Is(err, ErrNonCrashRecoveryRefused) {
			c.warn(fmt.Sprintf("service %s installed, but %v; scadad is restarted after a crash, not after a fatal error's exit", spec.Name, err))
			return nil
		}
		if errors.Is(err, ErrExists) {
			return fmt.Errorf("install service %s: it is installed already; `scadad service uninstall` first to change it: %w", spec.Name, err)
		}
		return fmt.Errorf("install service %s: %w", spec.Name, err)
	}
	return nil
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
