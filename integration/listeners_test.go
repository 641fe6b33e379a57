//go:build linux

package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// heldConns are a test's attack connections.
type heldConns struct {
	mu    sync.Mutex
	conns []net.Conn
	// resetAtConnect counts dials the server refused so fast that the
	// connect itself saw the reset.
	resetAtConnect int
}

// holdConns opens n TCP connections to addr, spread over the loopback
// source addresses srcs (127.0.0.0/8 is all loopback on Linux), sending
// first on each. They stay open until the test ends or closeAll is called.
func holdConns(t *testing.T, addr string, srcs []string, n int, first string) *heldConns {
	t.Helper()
	h := &heldConns{}
	t.Cleanup(h.closeAll)
	var wg sync.WaitGroup
	per := (n + len(srcs) - 1) / len(srcs)
	// A server that stopped accepting leaves its backlog full and dials
	// time out: the whole attack takes at most 15 s.
	deadline := time.Now().Add(15 * time.Second)
	for _, src := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second, Deadline: deadline}
			for range per {
				if time.Now().After(deadline) {
					return
				}
				c, err := d.Dial("tcp", addr)
				if errors.Is(err, syscall.ECONNRESET) {
					h.mu.Lock()
					h.resetAtConnect++
					h.mu.Unlock()
				}
				if err != nil {
					continue
				}
				if first != "" {
					c.SetWriteDeadline(time.Now().Add(time.Second))
					c.Write([]byte(first))
				}
				h.mu.Lock()
				h.conns = append(h.conns, c)
				h.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return h
}

func (h *heldConns) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

func (h *heldConns) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close()
	}
	h.conns = nil
}

// closedByServer counts the held connections the server has closed (read
// gives EOF or a reset within a short wait).
func (h *heldConns) closedByServer() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	closed := 0
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, c := range h.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			_, err := c.Read(make([]byte, 1))
			var ne net.Error
			if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
				mu.Lock()
				closed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return closed
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func loopbackSources(first, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("127.0.0.%d", first+i))
	}
	return out
}

var healthClient = &http.Client{Timeout: 2 * time.Second}

// healthStatus is n's /health/active status code (0: no answer).
func healthStatus(n *testcluster.Node) int {
	resp, err := healthClient.Get("http://" + n.HTTPAddr + "/health/active")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// metricWithin is metricLine with an answer within 2 s ("" otherwise).
func metricWithin(n *testcluster.Node, series string) string {
	resp, err := healthClient.Get("http://" + n.HTTPAddr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// rssMB is the resident size of process pid in MB (from /proc).
func rssMB(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb / 1024
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// openFiles is how many descriptors process pid has open.
func openFiles(pid int) int {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(fds)
}

func needPrlimit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("prlimit (util-linux) not installed")
	}
}

// TestHTTPListenerSurvivesDescriptorExhaustion: idle connections from
// anyone exhaust the Active's file descriptors (its limit lowered to 1,024
// while it runs, under its configured max_connections). The HTTP listener
// must not die of the EMFILE: it counts the failed accepts, retries, and
// serves again once the connections are gone, and a node is Active.
func TestHTTPListenerSurvivesDescriptorExhaustion(t *testing.T) {
	needPrlimit(t)
	c, _ := sfSetup(t, 1000)
	active := waitOneActive(t, c, 10*time.Second)
	if out, err := exec.Command("prlimit", "--pid", strconv.Itoa(active.PID()), "--nofile=1024:1024").CombinedOutput(); err != nil {
		t.Fatalf("prlimit: %v: %s", err, out)
	}
	attack := holdConns(t, active.HTTPAddr, loopbackSources(2, 8), 1100, "")
	testwait.For(t, 15*time.Second, active.ID+"'s descriptors exhausted", func() bool { return openFiles(active.PID()) >= 1020 })
	// Accepts now fail with EMFILE; let the listener meet a few.
	time.Sleep(time.Second)
	attack.closeAll()
	testwait.For(t, 20*time.Second, active.ID+"'s HTTP listener answering again", func() bool { return healthStatus(active) != 0 })
	for i := range 5 {
		if healthStatus(active) == 0 {
			t.Fatalf("poll %d after the attack: %s's HTTP listener does not answer", i, active.ID)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if v := metricWithin(active, "scadad_http_accept_errors_total"); v == "" || v == "0" {
		t.Fatalf("scadad_http_accept_errors_total = %q after EMFILE", v)
	}
	now := waitOneActive(t, c, 20*time.Second)
	testwait.For(t, 10*time.Second, "an enqueue acknowledged by the Active", func() bool {
		return enqueue(now, "sink", "after-emfile", []byte("x"))
	})
}

// TestHTTPConnectionBoundsKeepTheActiveServing: with the open-files limit
// at 1,024 from the start, the HTTP listener's bounds are fitted under it.
// One client address opening 600 idle connections gets its 256 and the
// rest are refused at once (reset), while health checks from another address and
// raft go on: the Active stays Active and no accept ever fails.
func TestHTTPConnectionBoundsKeepTheActiveServing(t *testing.T) {
	needPrlimit(t)
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info",
		Wrap: func(_ string, argv []string) []string {
			return append([]string{"prlimit", "--nofile=1024:1024", "--"}, argv...)
		}})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	attack := holdConns(t, active.HTTPAddr, []string{"127.0.0.2"}, 600, "")
	// A refused dial can see the server's reset in its connect: it
	// reached the server and was refused all the same.
	held := attack.count()
	attack.mu.Lock()
	resetAtConnect := attack.resetAtConnect
	attack.mu.Unlock()
	if reached := held + resetAtConnect; reached < 500 {
		t.Fatalf("only %d of 600 attack connections reached the server (%d opened, %d reset at connect)", reached, held, resetAtConnect)
	}
	var closed int
	if err := testwait.Poll(timeout(t, 10*time.Second), func() bool {
		closed = attack.closedByServer()
		return closed >= held-256
	}); err != nil {
		t.Fatalf("%d of the %d attack connections held were closed by the server, want at least %d (all over the 256 per address)", closed, held, held-256)
	}
	closed += resetAtConnect
	for i := range 5 {
		if code := healthStatus(active); code != http.StatusOK {
			t.Fatalf("poll %d of /health/active from 127.0.0.1 during the attack: %d", i, code)
		}
	}
	if got := c.Actives(); len(got) != 1 || got[0] != active {
		t.Fatalf("Actives during the attack: %v", ids(got))
	}
	refused, _ := strconv.Atoi(metricWithin(active, `scadad_http_connections_refused_total{reason="per_address"}`))
	if refused < closed {
		t.Fatalf("refused per address = %d, fewer than the %d connections closed", refused, closed)
	}
	if v := metricWithin(active, "scadad_http_accept_errors_total"); v != "0" {
		t.Fatalf("scadad_http_accept_errors_total = %q: the bound should keep descriptors from running out", v)
	}
	if !strings.Contains(active.LogTail(400), "lowered them to fit") {
		t.Fatal("no warning that the listeners' bounds were lowered to the 1,024 open-files limit")
	}
	t.Logf("%d of %d connections held refused; %d refusals counted", closed, held, refused)
}

// TestSlowBodyAttackKeepsTheActiveSmall: 1,000 connections announce an
// 8 MiB body and send none. The Active must hold what arrived, not what
// was announced: resident size under 200 MB, and it keeps serving.
func TestSlowBodyAttackKeepsTheActiveSmall(t *testing.T) {
	conns := 1000
	if v := os.Getenv("SCADAD_SLOWBODY_CONNS"); v != "" {
		conns, _ = strconv.Atoi(v)
	}
	c, _ := sfSetup(t, 1000)
	active := waitOneActive(t, c, 10*time.Second)
	before := rssMB(t, active.PID())
	head := fmt.Sprintf("POST /v1/sf/sink HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", 8<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	attack := holdConns(t, active.HTTPAddr, loopbackSources(2, 5), conns, head)
	maxRSS := 0
	for i := 0; i < 10 && ctx.Err() == nil; i++ {
		maxRSS = max(maxRSS, rssMB(t, active.PID()))
		time.Sleep(200 * time.Millisecond)
	}
	if code := healthStatus(active); code != http.StatusOK {
		t.Fatalf("/health/active during the attack: %d", code)
	}
	if !enqueue(active, "sink", "during-slow-bodies", []byte("x")) {
		t.Fatal("an enqueue during the attack was not acknowledged")
	}
	maxRSS = max(maxRSS, rssMB(t, active.PID()))
	t.Logf("%d slow-body connections held; RSS %d MB before, at most %d MB during", attack.count(), before, maxRSS)
	if maxRSS > 200 {
		t.Fatalf("RSS %d MB under %d slow-body connections, want at most 200 MB", maxRSS, conns)
	}
}
