//go:build !windows

package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

// dumpStacksOnSignal writes every goroutine's stack to w each time the
// process receives SIGUSR1, and keeps running. A node that looks stuck can
// then be asked what it is waiting for (kill -USR1 PID; the stacks land in
// the journal) without the restart that SIGQUIT would cost.
func dumpStacksOnSignal(ctx context.Context, w io.Writer) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
				_, _ = io.WriteString(w, "---- goroutine dump (SIGUSR1) ----\n")
				_ = pprof.Lookup("goroutine").WriteTo(w, 2)
				_, _ = io.WriteString(w, "---- end of goroutine dump ----\n")
			}
		}
	}()
}
