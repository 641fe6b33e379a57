package winsvc

import (
	"context"
	"fmt"
)

// Request is what the control manager asks of a running service.
type Request int

// The requests scadad accepts.
const (
	// Interrogate asks for the current state again.
	Interrogate Request = iota + 1
	// Stop is a stop from the control manager (`scadad service stop`,
	// `sc stop`, `net stop`) or the system shutting down.
	Stop
)

// Serve runs daemon as the service: it reports Running, cancels the
// daemon's context on Stop, reports StopPending meanwhile, and returns the
// exit code for the control manager once daemon returns: 0 after a
// stop, 1 after a fatal error, which makes the control manager apply the
// recovery actions. The start, the stop and a fatal error are recorded in
// events (about says which build started).
func Serve(daemon func(ctx context.Context) error, requests <-chan Request, report func(State), events Sink, about string) uint32 {
	report(StartPending)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- daemon(ctx) }()
	_ = events.Info(EventStarted, "scadad started as a service: "+about)
	report(Running)
	current := Running
	for {
		select {
		case err := <-done:
			if err != nil {
				_ = events.Error(EventFatal, fmt.Sprintf("scadad stopped on an error; the service manager restarts it (recovery actions): %v", err))
				return 1
			}
			if current == StopPending {
				_ = events.Info(EventStopped, "scadad stopped")
			} else {
				// The daemon ended without a stop request: the control
				// manager must see a failure to restart it.
				_ = events.Error(EventFatal, "scadad stopped without a stop request; the service manager restarts it (recovery actions)")
				return 1
			}
			return 0
		case r, ok := <-requests:
			if !ok {
				requests = nil
				continue
			}
			switch r {
			case Interrogate:
				report(current)
			case Stop:
				if current != StopPending {
					current = StopPending
					report(StopPending)
					cancel()
				}
			}
		}
	}
}
