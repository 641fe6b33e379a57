//go:build unix

package testcluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/pki"
)

// Options shape a cluster.
type Options struct {
	Mode    string // witness | pair | strict
	Voters  int
	Witness bool
	// OverrideAfter is the pair-mode override window (default 2 s here).
	OverrideAfter time.Duration
	// Extra is YAML merged over every node config: its fields replace the
	// generated ones, and a block (cluster:) merges field by field.
	Extra string
	// Dir holds everything; a new temporary folder when empty.
	Dir string
	// LogLevel of the nodes (default debug).
	LogLevel string
	// Host, when set, gives the IP address node id listens on (default
	// 127.0.0.1): a fault-injection suite puts each node in a network
	// namespace of its own. Ports are then fixed per node.
	Host func(id string) string
	// Pprof serves /debug/pprof/ on every node's HTTP listener.
	Pprof bool
	// OPCUA gives every voter an OPC UA endpoint on a free loopback port.
	OPCUA bool
	// HTTPTLS serves the nodes' HTTP listeners over TLS with producer
	// authentication, as scadad does by default. Without it the harness
	// sets http.insecure: plain HTTP, anyone may enqueue (a lab).
	HTTPTLS bool
	// Wrap, when set, rewrites a node's command line before it starts, e.g.
	// to prefix "ip netns exec ns-a".
	Wrap func(id string, argv []string) []string
}

// Node is one scadad process.
type Node struct {
	ID       string
	Witness  bool
	Dir      string
	Config   string
	RaftAddr string
	APIAddr  string
	HTTPAddr string
	// OPCUA is the node's OPC UA endpoint, empty when it serves none.
	OPCUA string
	// HTTPScheme is "https" on a cluster with Options.HTTPTLS, else "http".
	HTTPScheme string
	// Binary, when set, is the scadad this node runs instead of the
	// cluster's (an earlier release, in a mixed-version test); it is read
	// at each Start, so changing it between a stop and a start upgrades.
	Binary string
	// health reads /health/active (trusting the site CA over TLS).
	health *http.Client

	mu     sync.Mutex
	cmd    *exec.Cmd
	logf   *os.File
	exited chan struct{}
}

// Cluster is a set of nodes sharing one CA.
type Cluster struct {
	Bin   *Binaries
	Dir   string
	Mode  string
	Certs string
	Nodes []*Node
	owned bool
	wrap  func(id string, argv []string) []string
}

// New writes certificates and node configs; no process is started.
func New(bin *Binaries, o Options) (*Cluster, error) {
	c := &Cluster{Bin: bin, Dir: o.Dir, Mode: o.Mode}
	if c.Dir == "" {
		dir, err := os.MkdirTemp("", "scadad-cluster-")
		if err != nil {
			return nil, err
		}
		c.Dir, c.owned = dir, true
	}
	c.Certs = filepath.Join(c.Dir, "certs")
	var ids []string
	for i := 0; i < o.Voters; i++ {
		ids = append(ids, fmt.Sprintf("node-%c", 'a'+i))
	}
	if o.Witness {
		ids = append(ids, "witness")
	}
	var sans []pki.InitOption
	if o.Host != nil {
		for _, id := range ids {
			sans = append(sans, pki.WithExtraSANs(id, o.Host(id)))
		}
	}
	// Valid well past scadad's 30-day expiry warning, which would
	// otherwise open every node's log.
	if err := pki.Init(c.Certs, "test-site", ids, []string{"operator"}, 90*24*time.Hour, sans...); err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	ports, err := FreePorts(4 * len(ids))
	if err != nil {
		return nil, err
	}
	health := httpClient
	if o.HTTPTLS {
		if health, err = c.HTTPClient(""); err != nil {
			return nil, fmt.Errorf("health client: %w", err)
		}
	}
	c.wrap = o.Wrap
	for i, id := range ids {
		host := "127.0.0.1"
		if o.Host != nil {
			// Each node has an address of its own: fixed ports suffice.
			host = o.Host(id)
			ports[3*i], ports[3*i+1], ports[3*i+2] = 7101, 7201, 7301
			ports[3*len(ids)+i] = 4840
		}
		n := &Node{
			ID:       id,
			Witness:  o.Witness && i == len(ids)-1,
			Dir:      filepath.Join(c.Dir, id),
			RaftAddr: fmt.Sprintf("%s:%d", host, ports[3*i]),
			APIAddr:  fmt.Sprintf("%s:%d", host, ports[3*i+1]),
			HTTPAddr: fmt.Sprintf("%s:%d", host, ports[3*i+2]),
		}
		n.HTTPScheme, n.health = "http", health
		if o.HTTPTLS {
			n.HTTPScheme = "https"
		}
		if o.OPCUA && !n.Witness {
			n.OPCUA = fmt.Sprintf("opc.tcp://%s:%d", host, ports[3*len(ids)+i])
		}
		if err := os.MkdirAll(n.Dir, 0o755); err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	override := o.OverrideAfter
	if override == 0 {
		override = 2 * time.Second
	}
	level := o.LogLevel
	if level == "" {
		level = "debug"
	}
	for _, n := range c.Nodes {
		var b strings.Builder
		fmt.Fprintf(&b, "node_id: %s\ndata_dir: %s\n", n.ID, filepath.Join(n.Dir, "data"))
		fmt.Fprintf(&b, "cluster:\n  mode: %s\n  override_after: %s\n  members:\n", o.Mode, override)
		for _, m := range c.Nodes {
			fmt.Fprintf(&b, "    - {id: %s, raft_addr: %q, api_addr: %q, witness: %v, opcua: %q}\n", m.ID, m.RaftAddr, m.APIAddr, m.Witness, m.OPCUA)
		}
		fmt.Fprintf(&b, "tls:\n  ca: %s\n  cert: %s\n  key: %s\n", filepath.Join(c.Certs, "ca.crt"), filepath.Join(c.Certs, n.ID+".crt"), filepath.Join(c.Certs, n.ID+".key"))
		fmt.Fprintf(&b, "http:\n  listen: %q\n  pprof: %v\n  insecure: %v\nlog:\n  level: %s\n", n.HTTPAddr, o.Pprof, !o.HTTPTLS, level)
		conf, err := MergeYAML(b.String(), o.Extra)
		if err != nil {
			return nil, err
		}
		n.Config = filepath.Join(n.Dir, "node.yaml")
		if err := os.WriteFile(n.Config, []byte(conf), 0o644); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Node returns the node with the given id, or nil.
func (c *Cluster) Node(id string) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Start launches n's process; its output goes to scadad.log in its folder.
func (c *Cluster) Start(n *Node) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return fmt.Errorf("%s already running", n.ID)
	}
	logf, err := os.OpenFile(n.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	exe := c.Bin.Scadad
	if n.Binary != "" {
		exe = n.Binary
	}
	argv := []string{exe, "--config", n.Config}
	if c.wrap != nil {
		argv = c.wrap(n.ID, argv)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	dieWithParent(cmd)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", n.ID, err)
	}
	n.cmd, n.logf, n.exited = cmd, logf, make(chan struct{})
	exited := n.exited
	go func() {
		cmd.Wait()
		close(exited)
	}()
	return nil
}

// StartAll starts every node.
func (c *Cluster) StartAll() error {
	for _, n := range c.Nodes {
		if err := c.Start(n); err != nil {
			return err
		}
	}
	return nil
}

// Kill crashes n with SIGKILL and waits for the process to end.
func (c *Cluster) Kill(n *Node) { c.signal(n, syscall.SIGKILL) }

// Stop is a planned stop (SIGTERM); it waits up to 15 s, then kills.
func (c *Cluster) Stop(n *Node) { c.signal(n, syscall.SIGTERM) }

// Pause and Resume freeze and thaw n's process (SIGSTOP/SIGCONT).
func (c *Cluster) Pause(n *Node)  { n.send(syscall.SIGSTOP) }
func (c *Cluster) Resume(n *Node) { n.send(syscall.SIGCONT) }

// DumpStacks asks n to write every goroutine's stack to its log (SIGUSR1);
// the process keeps running. Tests call it when a node looks stuck.
func (c *Cluster) DumpStacks(n *Node) { n.send(syscall.SIGUSR1) }

func (n *Node) send(sig syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		n.cmd.Process.Signal(sig)
	}
}

func (c *Cluster) signal(n *Node, sig syscall.Signal) {
	n.mu.Lock()
	cmd, exited, logf := n.cmd, n.exited, n.logf
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	cmd.Process.Signal(syscall.SIGCONT) // a paused process must run to die of SIGTERM
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
	logf.Close()
}

// Close kills every node and removes the cluster's folder if it made it.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		c.Kill(n)
	}
	if c.owned {
		os.RemoveAll(c.Dir)
	}
}

// Running reports whether n's process is up.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// Exited reports whether n's process was started and has ended by itself
// (the tests then play the service manager and start it again).
func (n *Node) Exited() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return true
	default:
		return false
	}
}

// ExitCode is the exit status of n's process once it has ended by itself
// (see Exited), and -1 while it runs or was never started.
func (n *Node) ExitCode() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return -1
	}
	select {
	case <-n.exited:
		return n.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// PID is n's process id, 0 when it is not running.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// RaceReport is the first data race report in n's log ("" when none):
// a process built with the race detector (RaceEnv) writes it to stderr
// and goes on.
func (n *Node) RaceReport() string {
	data, _ := os.ReadFile(n.LogPath())
	at := bytes.Index(data, []byte("WARNING: DATA RACE"))
	if at < 0 {
		return ""
	}
	report := data[at:]
	if end := bytes.Index(report, []byte("\n==================")); end >= 0 {
		report = report[:end]
	}
	return string(report)
}

// LogPath is where n's output goes.
func (n *Node) LogPath() string { return filepath.Join(n.Dir, "scadad.log") }

// LogTail returns the last lines of n's log.
func (n *Node) LogTail(lines int) string {
	data, _ := os.ReadFile(n.LogPath())
	all := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// LogStory returns the last lines of n's log for a failed test's report,
// each run of lines with one message (a worker retrying every few hundred
// milliseconds) shown as its last line and a count: a plain tail of a
// node that retries is nothing but the retries, and hides what led there.
func (n *Node) LogStory(lines int) string {
	data, _ := os.ReadFile(n.LogPath())
	type run struct {
		line, message string
		count         int
	}
	var runs []run
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var rec struct {
			Message string `json:"message"`
		}
		msg := line
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Message != "" {
			msg = rec.Message
		}
		if k := len(runs) - 1; k >= 0 && runs[k].message == msg {
			runs[k].line = line
			runs[k].count++
			continue
		}
		runs = append(runs, run{line: line, message: msg, count: 1})
	}
	if len(runs) > lines {
		runs = runs[len(runs)-lines:]
	}
	var b strings.Builder
	for _, r := range runs {
		if r.count > 1 {
			fmt.Fprintf(&b, "(%d lines with this message, the last:)\n", r.count)
		}
		b.WriteString(r.line)
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(b.String(), "\n")
}

var httpClient = &http.Client{Timeout: 500 * time.Millisecond}

// Health is what /health/active says.
type Health struct {
	Active bool   `json:"active"`
	Role   string `json:"role"`
	Epoch  string `json:"epoch"`
	Node   string `json:"node"`
}

// URL is path on n's HTTP listener.
func (n *Node) URL(path string) string { return n.HTTPScheme + "://" + n.HTTPAddr + path }

// HTTPClient returns a client of the nodes' HTTP listeners that trusts the
// site CA and presents the client certificate name (none when empty).
func (c *Cluster) HTTPClient(name string) (*http.Client, error) {
	caPEM, err := os.ReadFile(filepath.Join(c.Certs, "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no CA certificate in %s", c.Certs)
	}
	conf := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
	if name != "" {
		cert, err := tls.LoadX509KeyPair(filepath.Join(c.Certs, name+".crt"), filepath.Join(c.Certs, name+".key"))
		if err != nil {
			return nil, err
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Timeout: httpClient.Timeout, Transport: &http.Transport{TLSClientConfig: conf}}, nil
}

// Health reads n's /health/active; ok is false when n does not answer.
func (n *Node) Health() (Health, bool) {
	var h Health
	resp, err := n.health.Get(n.URL("/health/active"))
	if err != nil {
		return h, false
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return h, false
	}
	return h, true
}

// Actives returns the running nodes that say they are Active.
func (c *Cluster) Actives() []*Node {
	var out []*Node
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		if h, ok := n.Health(); ok && h.Active {
			out = append(out, n)
		}
	}
	return out
}

// WaitOneActive waits until exactly one running node is Active and every
// other running node says standby or witness, and returns the Active.
func (c *Cluster) WaitOneActive(ctx context.Context) (*Node, error) {
	var active *Node
	err := testwait.Poll(ctx, func() bool {
		a := c.Actives()
		if len(a) != 1 {
			return false
		}
		for _, n := range c.Nodes {
			if !n.Running() || n == a[0] {
				continue
			}
			h, ok := n.Health()
			if !ok || (h.Role != "standby" && h.Role != "witness") {
				return false
			}
		}
		active = a[0]
		return true
	})
	if err != nil {
		var roles []string
		for _, n := range c.Nodes {
			h, ok := n.Health()
			roles = append(roles, fmt.Sprintf("%s=%s(running=%v answered=%v)", n.ID, h.Role, n.Running(), ok))
		}
		return nil, fmt.Errorf("no single Active node: %s: %w", strings.Join(roles, " "), err)
	}
	return active, nil
}

// Ctl runs scadactl against nodes (all running nodes when nil) and returns
// stdout, stderr and the exit code.
func (c *Cluster) Ctl(ctx context.Context, nodes []*Node, args ...string) (string, string, int, error) {
	if nodes == nil {
		for _, n := range c.Nodes {
			if n.Running() {
				nodes = append(nodes, n)
			}
		}
	}
	var eps []string
	for _, n := range nodes {
		eps = append(eps, n.APIAddr)
	}
	full := append([]string{"--endpoints", strings.Join(eps, ","), "--certs", c.Certs}, args...)
	cmd := exec.CommandContext(ctx, c.Bin.Scadactl, full...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errb.String(), ee.ExitCode(), nil
	}
	if err != nil {
		return "", "", -1, fmt.Errorf("run scadactl: %w", err)
	}
	return out.String(), errb.String(), 0, nil
}

// CtlJSON runs scadactl --output json and decodes stdout into v.
func (c *Cluster) CtlJSON(ctx context.Context, nodes []*Node, v any, args ...string) error {
	out, errs, code, err := c.Ctl(ctx, nodes, append([]string{"--output", "json"}, args...)...)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("scadactl %v: exit %d: %s", args, code, errs)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("scadactl %v: decode %q: %w", args, out, err)
	}
	return nil
}
