//go:build windows

package winsvc

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/eventlog"
)

// UnderServiceManager reports whether the control manager started this
// process.
func UnderServiceManager() bool {
	ok, err := svc.IsWindowsService()
	return err == nil && ok
}

// OpenEventLog opens the Event Log source name (registered by Create).
func OpenEventLog(name string) (Sink, func() error, error) {
	l, err := eventlog.Open(name)
	if err != nil {
		return nil, nil, fmt.Errorf("open the Event Log source %s: %w", name, err)
	}
	return l, l.Close, nil
}

// Run serves the control manager until daemon returns (Serve) and
// returns the process's exit code.
func Run(name string, daemon func(ctx context.Context) error, events Sink, about string) int {
	h := &handler{daemon: daemon, events: events, about: about}
	if err := svc.Run(name, h); err != nil {
		_ = events.Error(EventFatal, fmt.Sprintf("scadad: run as the service %s: %v", name, err))
		return 1
	}
	return int(h.code)
}

type handler struct {
	daemon func(ctx context.Context) error
	events Sink
	about  string
	code   uint32
}

// stopWaitHint is how long the control manager waits between StopPending
// reports before it gives up on the service: a planned stop hands the
// Active role over and shuts raft down, at most about 10 s.
const stopWaitHint = 30 * time.Second

func (h *handler) Execute(_ []string, changes <-chan svc.ChangeRequest, status chan<- svc.Status) (bool, uint32) {
	requests := make(chan Request)
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		for {
			select {
			case <-quit:
				return
			case c := <-changes:
				var r Request
				switch c.Cmd {
				case svc.Interrogate:
					r = Interrogate
				case svc.Stop, svc.Shutdown:
					r = Stop
				default:
					continue
				}
				select {
				case requests <- r:
				case <-quit:
					return
				}
			}
		}
	}()
	report := func(s State) {
		switch s {
		case StartPending:
			status <- svc.Status{State: svc.StartPending}
		case Running:
			status <- svc.Status{State: svc.Running, Accepts: svc.AcceptStop | svc.AcceptShutdown}
		case StopPending:
			status <- svc.Status{State: svc.StopPending, WaitHint: uint32(stopWaitHint / time.Millisecond)}
		}
	}
	h.code = Serve(h.daemon, requests, report, h.events, h.about)
	// A non-zero service-specific code makes the control manager count
	// a failure and apply the recovery actions.
	return h.code != 0, h.code
}
