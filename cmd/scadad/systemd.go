package main

import (
	"context"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/rs/zerolog"
)

// sdNotifier tells the service manager about the daemon's state; a no-op
// outside systemd (no NOTIFY_SOCKET) and on Windows.
type sdNotifier interface {
	Notify(state string) (bool, error)
}

type systemdNotifier struct{}

func (systemdNotifier) Notify(state string) (bool, error) { return sddaemon.SdNotify(false, state) }

// watchdogEvery is the interval systemd expects watchdog pings at
// (WatchdogSec=), 0 when it expects none.
func watchdogEvery() time.Duration {
	d, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil {
		return 0
	}
	return d
}

// keepWatchdog pings the service manager's watchdog at half its interval
// while healthy says so, until ctx ends: a daemon whose state storage
// failed, or that is wedged, stops pinging and systemd restarts it.
func keepWatchdog(ctx context.Context, n sdNotifier, every time.Duration, healthy func() bool, log zerolog.Logger) {
	if every <= 0 {
		return
	}
	t := time.NewTicker(every / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !healthy() {
			log.Warn().Msg("not pinging the systemd watchdog: the daemon is not healthy")
			continue
		}
		if _, err := n.Notify(sddaemon.SdNotifyWatchdog); err != nil {
			log.Warn().Err(err).Msg("systemd watchdog ping failed")
		}
	}
}
