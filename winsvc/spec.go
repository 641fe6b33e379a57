package winsvc

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// DefaultName is the service's name and its Event Log source.
const DefaultName = "scadad"

// ServiceFlag is scadad's flag that says it was started by the control
// manager. The service is registered with it rather than relying on
// svc.IsWindowsService alone, whose test (parent services.exe in session
// 0) Wine's control manager does not pass.
const ServiceFlag = "--service"

// DefaultRecovery is what the control manager does when scadad exits
// without being asked to: restart it after 5 s, then 30 s, then 60 s for
// every later failure, the seeds' `sc.exe failure ... restart/5000/
// restart/30000/restart/60000`. A fatal error (full disk, lost HTTP
// listener) exits non-zero on purpose so that this restarts it.
var DefaultRecovery = []time.Duration{5 * time.Second, 30 * time.Second, 60 * time.Second}

// DefaultResetAfter is how long the service must run without failing
// before the control manager counts failures from the first action again.
const DefaultResetAfter = 24 * time.Hour

// Spec is everything the control manager registers for scadad.
type Spec struct {
	Name        string
	DisplayName string
	Description string
	// Exe is the absolute path of scadad.exe; Args what it is started
	// with (the service manager starts it in System32, so every path in
	// them is absolute).
	Exe  string
	Args []string
	// Recovery are the restart delays of the first, second and every
	// later failure; ResetAfter resets the count.
	Recovery   []time.Duration
	ResetAfter time.Duration
}

// wantedRecovery is what Create asks the control manager for.
func (s Spec) wantedRecovery() Recovery {
	return Recovery{Restarts: s.Recovery, ResetAfter: s.ResetAfter, OnNonZeroExit: true}
}

// NewSpec is the service of the scadad binary exe with its node config at
// configPath. Both must be absolute Windows paths: the control manager
// starts the service with System32 as its working folder.
func NewSpec(exe, configPath string) (Spec, error) {
	if !isAbsWindows(exe) {
		return Spec{}, fmt.Errorf("service binary %q: not an absolute path", exe)
	}
	if configPath == "" {
		return Spec{}, errors.New("service install needs --config FILE (the node config the service starts with)")
	}
	if !isAbsWindows(configPath) {
		return Spec{}, fmt.Errorf("--config %q: the service starts in System32, so the path must be absolute (C:\\ProgramData\\scadad\\node.yaml)", configPath)
	}
	return Spec{
		Name:        DefaultName,
		DisplayName: "scadad SCADA redundancy daemon",
		Description: "Raft-replicated SCADA site pair: store-and-forward buffer, deployments and the OPC UA server of the Active node.",
		Exe:         exe,
		Args:        []string{ServiceFlag, "--config", configPath},
		Recovery:    DefaultRecovery,
		ResetAfter:  DefaultResetAfter,
	}, nil
}

// isAbsWindows reports whether p is absolute as Windows reads it: a drive
// letter and a separator (C:\ or C:/), or a UNC path (\\server\share).
// filepath.IsAbs says this only when built for Windows; the service
// commands are decided (and tested) everywhere.
func isAbsWindows(p string) bool {
	if strings.HasPrefix(p, `\\`) {
		return len(p) > 2
	}
	if len(p) < 3 || p[1] != ':' || (p[2] != '\\' && p[2] != '/') {
		return false
	}
	c := p[0] | 0x20
	return c >= 'a' && c <= 'z'
}
