//go:build linux

package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// network is where the suite's processes live and how links are cut. The
// netns implementation is the real one; loopback is the degraded fallback.
type network interface {
	// Kind says which implementation runs, for the report.
	Kind() string
	// Host is the address host id listens on ("" = 127.0.0.1 with free ports).
	Host(id string) string
	// Wrap rewrites a command line so it runs on host id.
	Wrap(id string, argv []string) []string
	// Dial opens a connection from the clients' host.
	Dial(ctx context.Context, network, addr string) (net.Conn, error)
	// Apply replaces the current link state: every listed link (from → to)
	// drops its packets; loss, if > 0, drops that fraction of the packets
	// between every pair of nodes.
	Apply(cut []link, loss float64) error
	// CutAt is when the last Apply's first host had its filters in (zero
	// when it cut nothing): the instant a partition starts, as a SIGKILL
	// starts at the signal.
	CutAt() time.Time
	// CanCut is false when links cannot be cut (partitions become pauses).
	CanCut() bool
	Close() error
}

// link is a one-way path between two hosts.
type link struct{ From, To string }

// Host ids besides the nodes.
const (
	hostSink   = "sink"
	hostClient = "cli"
)

// nsPrefixBase starts every namespace this suite creates; the run's pid
// follows, so a later run can tell a dead run's leftovers from a live one.
const nsPrefixBase = "scf"

var nsNamePattern = regexp.MustCompile(`^` + nsPrefixBase + `([0-9]+)-`)

// netnsNet puts every host in a namespace of its own, with veths to a
// bridge that lives in one more namespace of the suite's own (the root
// namespace's firewall never sees the traffic). No namespace has a default
// route, so nothing can leave the machine.
type netnsNet struct {
	prefix string
	subnet [3]byte
	hosts  map[string]string // id → IPv4
	order  []string
	nodes  map[string]bool

	mu      sync.Mutex
	applied map[string]bool // host ids that have filters installed
	cutAt   time.Time       // see CutAt
}

// netnsAvailable reports whether this process can make namespaces.
func netnsAvailable() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "not running as root"
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return false, tool + " not found"
		}
	}
	return true, ""
}

// cleanStaleNamespaces removes the namespaces (and kills the processes in
// them) of earlier runs whose process is gone.
func cleanStaleNamespaces() ([]string, error) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	var removed []string
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		name := fields[0]
		m := nsNamePattern.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if pid == os.Getpid() || processAlive(pid) {
			continue
		}
		if err := deleteNamespace(name); err != nil {
			return removed, err
		}
		removed = append(removed, name)
	}
	return removed, nil
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// deleteNamespace kills what still runs inside name, then deletes it.
func deleteNamespace(name string) error {
	if out, err := exec.Command("ip", "netns", "pids", name).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
		return fmt.Errorf("delete namespace %s: %v: %s", name, err, out)
	}
	return nil
}

// newNetns creates the bridge namespace and one namespace per host. On any
// error it removes what it made.
func newNetns(nodeIDs []string) (n *netnsNet, err error) {
	n = &netnsNet{
		prefix:  fmt.Sprintf("%s%d-", nsPrefixBase, os.Getpid()),
		subnet:  [3]byte{192, 0, 2},
		hosts:   map[string]string{},
		nodes:   map[string]bool{},
		applied: map[string]bool{},
	}
	for i, id := range nodeIDs {
		n.hosts[id] = n.addr(11 + i)
		n.nodes[id] = true
	}
	n.hosts[hostSink] = n.addr(20)
	n.hosts[hostClient] = n.addr(30)
	n.order = append(append([]string{}, nodeIDs...), hostSink, hostClient)
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	br := n.ns("br")
	if err := run("ip", "netns", "add", br); err != nil {
		return n, err
	}
	cmds := [][]string{
		{"ip", "-n", br, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", br, "link", "set", "br0", "up"},
	}
	for i, id := range n.order {
		ns := n.ns(id)
		veth := fmt.Sprintf("v%d", i)
		if err := run("ip", "netns", "add", ns); err != nil {
			return n, err
		}
		cmds = append(cmds,
			[]string{"ip", "-n", br, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"ip", "-n", br, "link", "set", veth, "master", "br0", "up"},
			[]string{"ip", "-n", ns, "link", "set", "lo", "up"},
			[]string{"ip", "-n", ns, "addr", "add", n.hosts[id] + "/24", "dev", "eth0"},
			[]string{"ip", "-n", ns, "link", "set", "eth0", "up"},
			// The drop class: a filter that matches sends the packet to a
			// blackhole qdisc (this kernel has neither netem nor gact).
			[]string{"ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1", "r2q", "1000"},
			[]string{"ip", "netns", "exec", ns, "tc", "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:1", "htb", "rate", "10gbit"},
			[]string{"ip", "netns", "exec", ns, "tc", "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:2", "htb", "rate", "10gbit"},
			[]string{"ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "parent", "1:2", "handle", "2:", "blackhole"},
		)
	}
	for _, c := range cmds {
		if err := run(c[0], c[1:]...); err != nil {
			return n, err
		}
	}
	return n, nil
}

func (n *netnsNet) addr(last int) string {
	return fmt.Sprintf("%d.%d.%d.%d", n.subnet[0], n.subnet[1], n.subnet[2], last)
}

func (n *netnsNet) ns(id string) string { return n.prefix + id }

func (n *netnsNet) Kind() string {
	return fmt.Sprintf("netns (namespaces %s*, bridge in %sbr, subnet %d.%d.%d.0/24, tc BPF drop filters)", n.prefix, n.prefix, n.subnet[0], n.subnet[1], n.subnet[2])
}

func (n *netnsNet) Host(id string) string { return n.hosts[id] }

func (n *netnsNet) Wrap(id string, argv []string) []string {
	return append([]string{"ip", "netns", "exec", n.ns(id)}, argv...)
}

func (n *netnsNet) CanCut() bool { return true }

func (n *netnsNet) CutAt() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cutAt
}

// Dial creates the socket inside the client namespace: a socket keeps the
// namespace it was created in, so only the creating thread has to switch.
func (n *netnsNet) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return dialInNamespace(ctx, "/var/run/netns/"+n.ns(hostClient), network, addr)
}

// listenInNamespace is the listening counterpart of dialInNamespace.
func (n *netnsNet) Listen(id, network, addr string) (net.Listener, error) {
	var l net.Listener
	err := inNamespace("/var/run/netns/"+n.ns(id), func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

func dialInNamespace(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNamespace(nsPath, func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// inNamespace runs fn on a locked OS thread switched into the namespace at
// nsPath. If the thread cannot be switched back it stays locked, so the
// runtime retires it with the goroutine and no other code ever runs in the
// wrong namespace.
func inNamespace(nsPath string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", syscall.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open own namespace: %w", err)
			return
		}
		defer self.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open namespace %s: %w", nsPath, err)
			return
		}
		defer target.Close()
		if err := setns(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter namespace %s: %w", nsPath, err)
			return
		}
		ferr := fn()
		if err := setns(self); err == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

func setns(f *os.File) error {
	return unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
}

// Apply installs one tc BPF filter per cut link on the sender's egress, and
// one probabilistic filter per node pair for loss. Everything installed
// before is removed first, so Apply(nil, 0) heals.
func (n *netnsNet) Apply(cut []link, loss float64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	byHost := map[string][]string{} // from → filter bytecodes
	for _, l := range cut {
		to, ok := n.hosts[l.To]
		if _, ok2 := n.hosts[l.From]; !ok || !ok2 {
			return fmt.Errorf("cut %s→%s: unknown host", l.From, l.To)
		}
		byHost[l.From] = append(byHost[l.From], bpfDropBytecode(net.ParseIP(to), 1))
	}
	if loss > 0 {
		for from := range n.nodes {
			for to := range n.nodes {
				if from != to {
					byHost[from] = append(byHost[from], bpfDropBytecode(net.ParseIP(n.hosts[to]), loss))
				}
			}
		}
	}
	var errs []error
	for id := range n.applied {
		if err := run("ip", "netns", "exec", n.ns(id), "tc", "filter", "del", "dev", "eth0", "parent", "1:"); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(n.applied, id)
	}
	hosts := make([]string, 0, len(byHost))
	for h := range byHost {
		hosts = append(hosts, h)
	}
	// The host with the most links cut first (the lone side of a
	// partition, an isolated Active): its links go at the first command,
	// and that is when the fault starts.
	sort.Slice(hosts, func(i, j int) bool {
		if a, b := len(byHost[hosts[i]]), len(byHost[hosts[j]]); a != b {
			return a > b
		}
		return hosts[i] < hosts[j]
	})
	n.cutAt = time.Time{}
	// A host's filters go in with one tc: a cable pulled or a switch port
	// dying cuts all of a node's links at once. One command per filter
	// (a process each, tens of milliseconds apart on a loaded machine)
	// cut the isolated Active's link to the Standby before its link to
	// the witness, so the witness nearly always held entries the Standby
	// lacked: a slower failover path that a real partition takes only
	// when entries are in flight at the cut.
	for _, h := range hosts {
		var batch strings.Builder
		for i, code := range byHost[h] {
			fmt.Fprintf(&batch, "filter add dev eth0 parent 1: protocol ip prio 10 handle %d bpf bytecode \"%s\" classid 1:2\n", i+1, code)
		}
		if err := runInput(batch.String(), "ip", "netns", "exec", n.ns(h), "tc", "-batch", "-"); err != nil {
			errs = append(errs, err)
			continue
		}
		if n.cutAt.IsZero() {
			n.cutAt = time.Now()
		}
		n.applied[h] = true
	}
	return errors.Join(errs...)
}

// Close deletes every namespace of this run (killing what runs in them).
func (n *netnsNet) Close() error {
	var errs []error
	for _, id := range append(append([]string{}, n.order...), "br") {
		name := n.ns(id)
		if _, err := os.Stat("/var/run/netns/" + name); err != nil {
			continue
		}
		if err := deleteNamespace(name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func run(name string, args ...string) error {
	return runInput("", name, args...)
}

// runInput runs a command with input on its standard input.
func runInput(input, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
