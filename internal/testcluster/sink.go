//go:build unix

package testcluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Sink is a running sfsink process: the delivery target of the tests.
type Sink struct {
	URL    string
	Record string
	addr   string
	cmd    *exec.Cmd
	exited chan struct{}
}

// Delivery is one request the sink recorded.
type Delivery struct {
	Seq    uint64    `json:"seq"`
	Time   time.Time `json:"time"` // arrival, RFC 3339 with nanoseconds
	ID     string    `json:"id"`
	Epoch  string    `json:"epoch"`
	Size   int       `json:"size"`
	SHA256 string    `json:"sha256"`
	Status int       `json:"status"`
	Body   []byte    `json:"body"` // recorded only when the sink runs with -bodies
	// MessageIDs is a batch's X-Scadad-Message-Ids header.
	MessageIDs string `json:"message_ids"`
}

// StartSink runs sfsink on a free loopback port, recording into dir.
func StartSink(bin *Binaries, dir string, args ...string) (*Sink, error) {
	return StartSinkOn(bin, dir, "127.0.0.1:0", nil, args...)
}

// StartSinkOn runs sfsink listening on listen, its command line rewritten
// by wrap when set (a fault suite puts the sink in a network namespace of
// its own with "ip netns exec").
func StartSinkOn(bin *Binaries, dir, listen string, wrap func(argv []string) []string, args ...string) (*Sink, error) {
	record := filepath.Join(dir, fmt.Sprintf("sink-%d.jsonl", time.Now().UnixNano()))
	argv := append([]string{bin.Sfsink, "-listen", listen, "-record", record}, args...)
	if wrap != nil {
		argv = wrap(argv)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	dieWithParent(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(record + ".log")
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sfsink: %w", err)
	}
	first, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("sfsink did not print its address: %w", err)
	}
	go io.Copy(io.Discard, stdout)
	addr := strings.TrimSpace(first)
	addr = strings.TrimPrefix(strings.TrimPrefix(addr, "listening on "), "http://")
	s := &Sink{URL: "http://" + addr + "/ingest", Record: record, addr: addr, cmd: cmd, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		logf.Close()
		close(s.exited)
	}()
	return s, nil
}

// SetFailing makes the sink answer every request with an error (or not).
func (s *Sink) SetFailing(fail bool) error {
	resp, err := http.Post(fmt.Sprintf("http://%s/control?fail=%v", s.addr, fail), "text/plain", nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("sink control: %s", resp.Status)
	}
	return nil
}

// Close stops the sink (SIGTERM, so it flushes its record).
func (s *Sink) Close() { terminate(s.cmd.Process, s.exited) }

// terminate stops a helper process with SIGTERM and kills it if it has not
// exited (closed exited) within 5 s.
func terminate(p *os.Process, exited <-chan struct{}) {
	p.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		p.Kill()
		<-exited
	}
}

// Deliveries reads what the sink recorded so far: the successful requests
// (2xx) only.
func (s *Sink) Deliveries() ([]Delivery, error) {
	all, err := s.Requests()
	var out []Delivery
	for _, d := range all {
		if d.Status >= 200 && d.Status < 300 {
			out = append(out, d)
		}
	}
	return out, err
}

// Requests reads every request the sink recorded so far, answered with
// success or not, in arrival order.
func (s *Sink) Requests() ([]Delivery, error) {
	f, err := os.Open(s.Record)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	defer f.Close()
	var out []Delivery
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var d Delivery
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			continue // a line being written right now
		}
		out = append(out, d)
	}
	return out, sc.Err()
}

// SiteConfig is a minimal valid site configuration whose store-and-forward
// targets are the given name → URL pairs, with fast test backoffs.
func SiteConfig(name string, targets map[string]string, maxAttempts int) []byte {
	return SiteConfigGateway(name, "127.0.0.1:1", targets, maxAttempts)
}

// SiteConfigGateway is SiteConfig with the gateway connection pointing at
// gateway (a running mxgw-sim) and a writable attribute.
func SiteConfigGateway(name, gateway string, targets map[string]string, maxAttempts int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `version: 1
name: %s
connections:
  - name: gw
    kind: mxaccess
    mxaccess:
      endpoint: %s
instances:
  - name: Pump1
    connection: gw
    attributes:
      - {name: Speed, type: double, tag: Pump1.Speed}
      - {name: SpeedSP, type: double, tag: Pump1.SpeedSP, writable: true}
opcua:
  namespace_uri: urn:test:scadad
  security: [{policy: None, mode: None}]
  identities: {anonymous: true, anonymous_can_write: true}
targets:
`, name, gateway)
	for _, t := range sortedKeys(targets) {
		fmt.Fprintf(&b, "  - {name: %s, url: %q, timeout: 2s, backoff_floor: 20ms, backoff_max: 200ms, max_attempts: %d, max_payload_bytes: 65536}\n", t, targets[t], maxAttempts)
	}
	return []byte(b.String())
}
