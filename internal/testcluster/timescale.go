//go:build linux

package testcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Timescale is a TimescaleDB of a test's own: the TimescaleDB extension
// built into PGlite (PostgreSQL compiled to WebAssembly) and run by Node
// (timescale/server.mjs), its data in a directory, served on a free
// loopback port. Debian packages no TimescaleDB; its hypertables, their
// chunks and their rule that a unique key must hold the partitioning
// column are the extension's own code here.
//
// The server serves one connection at a time; the others wait their turn.
type Timescale struct {
	// DSN connects to the server; it asks for a password and takes any,
	// which PasswordFile holds, as a target is configured.
	DSN           string
	PasswordFile  string
	Port          int
	data, logPath string

	cmd    *exec.Cmd
	exited chan struct{}
}

// timescaleDir is where server.mjs and its lock file are; .ci/run
// installs the packages there with npm ci.
func timescaleDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "timescale")
}

// ErrNoNode is StartTimescale's error where node is not installed.
var ErrNoNode = errors.New("TimescaleDB runs under node (Node 20), which is not on PATH; .ci/run installs it")

// StartTimescale makes a database under dir and starts it.
func StartTimescale(dir string) (*Timescale, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return nil, ErrNoNode
	}
	if _, err := os.Stat(filepath.Join(timescaleDir(), "node_modules", "@unni-craftsman", "pglite")); err != nil {
		return nil, fmt.Errorf("the TimescaleDB build is not installed: run `npm ci` in %s (.ci/run does): %w", timescaleDir(), err)
	}
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp(dir, "timescale-")
	if err != nil {
		return nil, err
	}
	t := &Timescale{Port: ports[0], data: filepath.Join(root, "data"), logPath: filepath.Join(root, "server.log"),
		PasswordFile: filepath.Join(root, "password")}
	if err := os.WriteFile(t.PasswordFile, []byte("any\n"), 0o600); err != nil {
		return nil, err
	}
	t.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", t.Port)
	if err := t.Start(); err != nil {
		return nil, err
	}
	return t, nil
}

// Start runs the server (again, on the same data) and waits until it
// answers on its port. The first start creates the database, a few
// seconds.
func (t *Timescale) Start() error {
	logf, err := os.OpenFile(t.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command("node", "server.mjs", fmt.Sprint(t.Port), t.data)
	cmd.Dir = timescaleDir()
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start the TimescaleDB server: %w", err)
	}
	lines := bufio.NewScanner(stdout)
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		logf.Close()
		close(exited)
	}()
	ready := make(chan bool, 1)
	go func() { ready <- lines.Scan() && lines.Text() == "listening" }()
	select {
	case ok := <-ready:
		if !ok {
			<-exited
			log, _ := os.ReadFile(t.logPath)
			return fmt.Errorf("the TimescaleDB server did not start: %s", log)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-exited
		return errors.New("the TimescaleDB server did not listen within 60 s")
	}
	go io.Copy(io.Discard, stdout) // nothing more is printed; a full pipe would stall it
	t.cmd, t.exited = cmd, exited
	return nil
}

// Connect opens a connection of the test's own. The server serves one
// connection at a time: this one waits while a target's is open (stop the
// target's nodes first), and holds the target off while it is.
func (t *Timescale) Connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(t.DSN)
	if err != nil {
		return nil, err
	}
	cfg.Password = "any"
	return pgx.ConnectConfig(ctx, cfg)
}

// Stop closes the database (its files whole, what is committed stays) and
// waits for the server to exit; connections are cut.
func (t *Timescale) Stop() {
	if t.cmd == nil {
		return
	}
	t.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-t.exited:
	case <-time.After(20 * time.Second):
		t.cmd.Process.Kill()
		<-t.exited
	}
	t.cmd = nil
}

// Log is what the server wrote to its standard error.
func (t *Timescale) Log() string {
	b, _ := os.ReadFile(t.logPath)
	return strings.TrimSpace(string(b))
}
