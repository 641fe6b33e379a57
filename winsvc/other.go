//go:build !windows

package winsvc

import (
	"context"
	"errors"
)

// ErrNotWindows is what the service commands say off Windows.
var ErrNotWindows = errors.New("scadad service is for Windows; on Linux the .deb and .rpm install a systemd unit (systemctl enable --now scadad)")

// NewManager has no control manager to offer off Windows.
func NewManager() (Manager, error) { return nil, ErrNotWindows }

// UnderServiceManager is false off Windows: systemd runs scadad as a
// plain process and stops it with SIGTERM.
func UnderServiceManager() bool { return false }

// OpenEventLog has no Event Log to open off Windows.
func OpenEventLog(string) (Sink, func() error, error) { return nil, nil, ErrNotWindows }

// Run cannot serve a control manager off Windows.
func Run(string, func(ctx context.Context) error, Sink, string) int { return 1 }
