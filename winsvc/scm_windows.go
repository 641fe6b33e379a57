//go:build windows

package winsvc

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/eventlog"
	"golang.org/x/sys/windows/svc/mgr"
)

// SCM is the Manager of the local Windows service control manager. Each
// call connects and disconnects: the commands make a handful of calls.
type SCM struct{}

// NewManager is the local service control manager.
func NewManager() (Manager, error) { return SCM{}, nil }

func (SCM) with(f func(m *mgr.Mgr) error) error {
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("connect to the service control manager (run as Administrator): %w", err)
	}
	defer func() { _ = m.Disconnect() }()
	return f(m)
}

func (s SCM) open(name string, f func(*mgr.Service) error) error {
	return s.with(func(m *mgr.Mgr) error {
		sv, err := m.OpenService(name)
		if err != nil {
			if errors.Is(err, windows.ERROR_SERVICE_DOES_NOT_EXIST) {
				return fmt.Errorf("%s: %w", name, ErrNotInstalled)
			}
			return err
		}
		defer func() { _ = sv.Close() }()
		return f(sv)
	})
}

// Create implements Manager.
func (s SCM) Create(spec Spec) error {
	return s.with(func(m *mgr.Mgr) error {
		if sv, err := m.OpenService(spec.Name); err == nil {
			_ = sv.Close()
			return fmt.Errorf("%s: %w", spec.Name, ErrExists)
		}
		sv, err := m.CreateService(spec.Name, spec.Exe, mgr.Config{
			StartType:    mgr.StartAutomatic,
			ErrorControl: mgr.ErrorNormal,
			DisplayName:  spec.DisplayName,
			Description:  spec.Description,
		}, spec.Args...)
		if err != nil {
			return fmt.Errorf("create: %w", err)
		}
		defer func() { _ = sv.Close() }()
		partial := configure(sv, spec.wantedRecovery())
		if partial != nil && !errors.Is(partial, ErrNonCrashRecoveryRefused) {
			_ = sv.Delete()
			return partial
		}
		if err := eventlog.InstallAsEventCreate(spec.Name, eventlog.Error|eventlog.Warning|eventlog.Info); err != nil {
			// A source left over from an earlier install is fine.
			if !isExistingSource(err) {
				_ = sv.Delete()
				return fmt.Errorf("register the Event Log source %s: %w", spec.Name, err)
			}
		}
		return partial
	})
}

// isExistingSource: eventlog.Install reports an existing source with a
// plain error text, not an errno.
func isExistingSource(err error) bool {
	return strings.HasSuffix(err.Error(), "registry key already exists")
}

func configure(sv *mgr.Service, r Recovery) error {
	actions := make([]mgr.RecoveryAction, len(r.Restarts))
	for i, d := range r.Restarts {
		actions[i] = mgr.RecoveryAction{Type: mgr.ServiceRestart, Delay: d}
	}
	if err := sv.SetRecoveryActions(actions, uint32(r.ResetAfter.Seconds())); err != nil {
		return fmt.Errorf("set the recovery actions: %w", err)
	}
	// A fatal error exits with a code, it does not crash: that must
	// count as a failure too.
	if err := sv.SetRecoveryActionsOnNonCrashFailures(r.OnNonZeroExit); err != nil {
		if errors.Is(err, windows.ERROR_INVALID_LEVEL) {
			// Windows takes it since Vista; Wine 8 does not.
			return fmt.Errorf("%w (%v)", ErrNonCrashRecoveryRefused, err)
		}
		return fmt.Errorf("set the recovery actions on non-crash failures: %w", err)
	}
	return nil
}

// SetRecovery implements Manager.
func (s SCM) SetRecovery(name string, r Recovery) error {
	return s.open(name, func(sv *mgr.Service) error { return configure(sv, r) })
}

// Delete implements Manager.
func (s SCM) Delete(name string) error {
	err := s.open(name, func(sv *mgr.Service) error { return sv.Delete() })
	if err != nil {
		return err
	}
	if err := eventlog.Remove(name); err != nil {
		return fmt.Errorf("remove the Event Log source %s: %w", name, err)
	}
	return nil
}

// Start implements Manager.
func (s SCM) Start(name string) error {
	return s.open(name, func(sv *mgr.Service) error { return sv.Start() })
}

// Stop implements Manager.
func (s SCM) Stop(name string) error {
	return s.open(name, func(sv *mgr.Service) error {
		_, err := sv.Control(svc.Stop)
		return err
	})
}

// Query implements Manager.
func (s SCM) Query(name string) (Status, error) {
	var st Status
	err := s.open(name, func(sv *mgr.Service) error {
		q, err := sv.Query()
		if err != nil {
			return err
		}
		st = statusOf(q)
		return nil
	})
	return st, err
}

// Recovery implements Manager.
func (s SCM) Recovery(name string) (Recovery, error) {
	var r Recovery
	err := s.open(name, func(sv *mgr.Service) error {
		actions, err := sv.RecoveryActions()
		if err != nil {
			return fmt.Errorf("read the recovery actions: %w", err)
		}
		for i, a := range actions {
			if a.Type != mgr.ServiceRestart {
				return fmt.Errorf("recovery action %d is of type %d, not a restart", i+1, a.Type)
			}
			r.Restarts = append(r.Restarts, a.Delay)
		}
		reset, err := sv.ResetPeriod()
		if err != nil {
			return fmt.Errorf("read the recovery reset period: %w", err)
		}
		r.ResetAfter = time.Duration(reset) * time.Second
		if r.OnNonZeroExit, err = sv.RecoveryActionsOnNonCrashFailures(); err != nil {
			return fmt.Errorf("read the recovery actions' non-crash flag: %w", err)
		}
		return nil
	})
	return r, err
}

func statusOf(q svc.Status) Status {
	st := Status{State: OtherState, ExitCode: q.Win32ExitCode}
	if q.Win32ExitCode == uint32(windows.ERROR_SERVICE_SPECIFIC_ERROR) {
		st.ExitCode = q.ServiceSpecificExitCode
	}
	switch q.State {
	case svc.Stopped:
		st.State = Stopped
	case svc.StartPending:
		st.State = StartPending
	case svc.StopPending:
		st.State = StopPending
	case svc.Running:
		st.State = Running
	}
	return st
}
