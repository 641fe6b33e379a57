package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "sfsink:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

type config struct {
	listen    string
	record    string
	fsync     bool
	failFirst int64
	failRate  float64
	delay     time.Duration
	status    int
	seed      uint64
	bodies    bool
	// retryAfter, when set, is sent as Retry-After with every failure.
	retryAfter string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("sfsink", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:0", "address to listen on")
	fs.StringVar(&c.record, "record", "", "append one JSON line per request to this file (none when empty)")
	fs.BoolVar(&c.fsync, "fsync", true, "fsync the record before answering (false: answer once written, for throughput runs)")
	fs.Int64Var(&c.failFirst, "fail-first", 0, "fail the first N requests")
	fs.Float64Var(&c.failRate, "fail-rate", 0, "fail each later request with this probability (0..1)")
	fs.DurationVar(&c.delay, "delay", 0, "wait this long before answering each request")
	fs.IntVar(&c.status, "status", http.StatusServiceUnavailable, "HTTP status of a failed request")
	fs.StringVar(&c.retryAfter, "retry-after", "", "send this Retry-After header (seconds or an HTTP date) with every failed request")
	fs.BoolVar(&c.bodies, "bodies", false, "record each request's body too (for tests that check content, not only digests)")
	fs.Uint64Var(&c.seed, "seed", uint64(time.Now().UnixNano()), "seed of the -fail-rate draws")
	if err := fs.Parse(args); err != nil {
		return c, fmt.Errorf("%w: %v", errUsage, err)
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	case c.failFirst < 0:
		return c, fmt.Errorf("%w: -fail-first %d is negative", errUsage, c.failFirst)
	case c.failRate < 0 || c.failRate > 1:
		return c, fmt.Errorf("%w: -fail-rate %v is outside 0..1", errUsage, c.failRate)
	case c.delay < 0:
		return c, fmt.Errorf("%w: -delay %v is negative", errUsage, c.delay)
	case c.status < 100 || c.status > 599 || (c.status >= 200 && c.status < 300):
		return c, fmt.Errorf("%w: -status %d is not a failure status", errUsage, c.status)
	}
	return c, nil
}

// run serves until ctx ends, then drains: in-flight requests are answered
// and their records synced before it returns.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	var file *os.File
	if cfg.record != "" {
		file, err = os.OpenFile(cfg.record, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("open record file: %w", err)
		}
	}
	rec := newRecorder(file, cfg.fsync)
	defer rec.close()

	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.listen, err)
	}
	if _, err := fmt.Fprintln(stdout, ln.Addr().String()); err != nil {
		_ = ln.Close()
		return fmt.Errorf("print address: %w", err)
	}
	s := newSink(cfg, rec)
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	return rec.close()
}
