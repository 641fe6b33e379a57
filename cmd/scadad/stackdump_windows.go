package main

import (
	"context"
	"io"
)

// dumpStacksOnSignal does nothing on Windows, which has no SIGUSR1; use the
// pprof endpoint (http.pprof) there.
func dumpStacksOnSignal(context.Context, io.Writer) {}
