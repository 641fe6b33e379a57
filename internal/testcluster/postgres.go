//go:build linux

package testcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/scadad/scadad/pki"
)

// Postgres is a PostgreSQL server of a test's own: initdb into a fresh
// directory, listening on a free loopback port only, password authentication for the user "scadad". It runs as
// nobody when the test runs as root (postgres refuses root). No system
// service is used or assumed. No Unix socket: a test's temp path is
// longer than a socket path may be.
type Postgres struct {
	// DSN connects as scadad without the password (it is in
	// PasswordFile, as a target is configured).
	DSN          string
	PasswordFile string
	Password     string
	Port         int
	bin, data    string
	cred         *syscall.Credential
	cmd          *exec.Cmd
	exited       chan struct{}
	logPath      string
	// CAFile is, with PostgresOptions.TLS, the CA of the server's
	// certificate (the DSN then says sslmode=verify-full with it).
	CAFile  string
	tlsArgs []string
}

// PostgresOptions change StartPostgresWith's server.
type PostgresOptions struct {
	// TLS serves TLS with a certificate for 127.0.0.1 of a CA made for the
	// server and accepts no connection without it (pg_hba hostssl only).
	TLS bool
}

// postgresBin finds the server's binaries: Debian's newest
// /usr/lib/postgresql/N/bin, or initdb on PATH.
func postgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("PostgreSQL server binaries not found (apt-get install postgresql; .ci/run does)")
}

// StartPostgres makes a database cluster under dir and starts it.
func StartPostgres(dir string) (*Postgres, error) { return StartPostgresWith(dir, PostgresOptions{}) }

// StartPostgresWith is StartPostgres with options.
func StartPostgresWith(dir string, o PostgresOptions) (*Postgres, error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp(dir, "pg-")
	if err != nil {
		return nil, err
	}
	p := &Postgres{Port: ports[0], bin: bin, data: filepath.Join(root, "data"), Password: "pw-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	p.PasswordFile = filepath.Join(root, "password")
	p.logPath = filepath.Join(root, "postgres.log")
	if err := os.WriteFile(p.PasswordFile, []byte(p.Password+"\n"), 0o600); err != nil {
		return nil, err
	}
	pwfile := filepath.Join(root, "initdb-password")
	if err := os.WriteFile(pwfile, []byte(p.Password+"\n"), 0o644); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		// The test's temp directories are root's, mode 0700: the server's
		// own directory must be nobody's, and reachable.
		p.cred = &syscall.Credential{Uid: 65534, Gid: 65534}
		// Every directory up to the system's temp directory (t.TempDir
		// makes two levels, both 0700) must be passable.
		for d := root; d != "/" && d != filepath.Clean(os.TempDir()); d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				return nil, err
			}
		}
		if err := os.Chown(root, 65534, 65534); err != nil {
			return nil, err
		}
		if err := os.Chown(pwfile, 65534, 65534); err != nil {
			return nil, err
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", p.data, "-U", "scadad", "--pwfile", pwfile,
		"--auth", "scram-sha-256", "--encoding", "UTF8", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	p.DSN = fmt.Sprintf("postgres://scadad@127.0.0.1:%d/postgres?sslmode=disable", p.Port)
	if o.TLS {
		if err := p.serveTLS(root); err != nil {
			return nil, err
		}
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

// Start runs the server (again) and waits until it answers.
func (p *Postgres) Start() error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := []string{"-D", p.data, "-k", "", "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port),
		// A test's database: durability across a crash of the machine is
		// not what is tested, the statements' atomicity is.
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "max_connections=50"}
	cmd := exec.Command(filepath.Join(p.bin, "postgres"), append(args, p.tlsArgs...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	p.cmd, p.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) {
		cmd.Wait()
		logf.Close()
		close(exited)
	}(p.exited)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := p.Connect(ctx)
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		select {
		case <-p.exited:
			log, _ := os.ReadFile(p.logPath)
			return fmt.Errorf("postgres exited at start: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not answering after 30 s: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// serveTLS writes the server's certificate and key (of a new CA, in
// CAFile) into the data directory, turns ssl on, and lets only TLS
// connections in.
func (p *Postgres) serveTLS(root string) error {
	ca, err := pki.GenerateCA("pg-test", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	if err != nil {
		return err
	}
	server, err := ca.IssueNode("db", 24*time.Hour)
	if err != nil {
		return err
	}
	p.CAFile = filepath.Join(root, "ca.pem")
	if err := os.WriteFile(p.CAFile, ca.CertPEM, 0o644); err != nil {
		return err
	}
	cert, key := filepath.Join(p.data, "server.crt"), filepath.Join(p.data, "server.key")
	hba := filepath.Join(p.data, "pg_hba.conf")
	for _, f := range []struct {
		path string
		data []byte
	}{{cert, server.CertPEM}, {key, server.KeyPEM}, {hba, []byte("hostssl all all 127.0.0.1/32 scram-sha-256\n")}} {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return err
		}
		if p.cred != nil {
			if err := os.Chown(f.path, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
				return err
			}
		}
	}
	p.tlsArgs = []string{"-c", "ssl=on", "-c", "ssl_cert_file=" + cert, "-c", "ssl_key_file=" + key}
	p.DSN = fmt.Sprintf("postgres://scadad@127.0.0.1:%d/postgres?sslmode=verify-full&sslrootcert=%s", p.Port, p.CAFile)
	return nil
}

// Connect opens a connection as scadad.
func (p *Postgres) Connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(p.DSN)
	if err != nil {
		return nil, err
	}
	cfg.Password = p.Password
	return pgx.ConnectConfig(ctx, cfg)
}

// Stop shuts the server down (fast shutdown: connections are cut, what
// is committed stays) and waits for it.
func (p *Postgres) Stop() {
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
	p.cmd = nil
}
