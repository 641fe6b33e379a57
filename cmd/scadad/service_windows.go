//go:build windows

package main

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/windows/svc"
)

// serviceName is the name scadad registers under with the Windows service
// control manager (sc.exe create scadad binPath= "...\scadad.exe --config ...").
const serviceName = "scadad"

// underServiceManager reports whether the process was started by the
// Windows service control manager.
func underServiceManager() bool {
	ok, err := svc.IsWindowsService()
	return err == nil && ok
}

// runAsService runs daemon under the service control manager: Stop and
// Shutdown requests cancel its context, which stops scadad as SIGTERM would.
func runAsService(daemon func(ctx context.Context) error) int {
	h := &serviceHandler{daemon: daemon}
	if err := svc.Run(serviceName, h); err != nil {
		fmt.Fprintf(os.Stderr, "scadad: service: %v\n", err)
		return 1
	}
	return h.code
}

type serviceHandler struct {
	daemon func(ctx context.Context) error
	code   int
}

func (h *serviceHandler) Execute(_ []string, requests <-chan svc.ChangeRequest, status chan<- svc.Status) (bool, uint32) {
	status <- svc.Status{State: svc.StartPending}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.daemon(ctx) }()
	status <- svc.Status{State: svc.Running, Accepts: svc.AcceptStop | svc.AcceptShutdown}
	for {
		select {
		case err := <-done:
			cancel()
			if err != nil {
				fmt.Fprintf(os.Stderr, "scadad: %v\n", err)
				h.code = 1
				return true, 1
			}
			return false, 0
		case r := <-requests:
			switch r.Cmd {
			case svc.Interrogate:
				status <- r.CurrentStatus
			case svc.Stop, svc.Shutdown:
				status <- svc.Status{State: svc.StopPending}
				cancel()
			}
		}
	}
}
