//go:build !windows

package main

import "context"

// underServiceManager is false off Windows: systemd runs scadad as a plain
// process and stops it with SIGTERM.
func underServiceManager() bool { return false }

func runAsService(func(ctx context.Context) error) int { return 1 }
