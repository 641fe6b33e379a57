package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/internal/devsite"
	"github.com/scadad/scadad/internal/lockedbuf"
	"github.com/scadad/scadad/internal/testwait"
)

// scadad --dev is the whole job in one command: after it, the demo site
// answers on OPC UA with moving values of every type, a message enqueued
// reaches the recording sink, the status page and health answer, and
// Ctrl-C (SIGINT) stops every part and frees every port.
func TestDevRunsTheWholeDemo(t *testing.T) { testDev(t, 1) }

// scadad --dev --nodes 3 is a local witness site: two voters serving OPC
// UA, one of them Active, and a witness.
func TestDevThreeNodes(t *testing.T) { testDev(t, 3) }

func testDev(t *testing.T, nodes int) {
	dir := t.TempDir()
	layout := devsite.Layout{Dir: dir, Base: freeDevBase(t, nodes), Nodes: nodes}
	cmd := exec.Command(bin.Scadad, "--dev", "--dev-dir", dir, "--nodes", strconv.Itoa(nodes), "--dev-port-base", strconv.Itoa(layout.Base))
	var stdout lockedbuf.Buffer
	logPath := filepath.Join(dir, "scadad.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = &stdout, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("---- scadad --dev stdout ----\n%s\n---- last log lines ----\n%s", stdout.String(), fileTail(logPath, 60))
		}
	})

	testwait.For(t, 90*time.Second, "scadad --dev to say the demo site is deployed", func() bool {
		return strings.Contains(stdout.String(), "the demo site deployed")
	})

	// Health: one Active among the nodes, on the HTTPS listener.
	client := devHTTPClient(t, layout, devsite.Operator)
	active := -1
	testwait.For(t, 60*time.Second, "one node to say it is Active on /health/active", func() bool {
		active = -1
		for i := range nodes {
			resp, err := client.Get("https://" + layout.HTTPAddr(i) + "/health/active")
			if err != nil {
				continue
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if active >= 0 {
					return false
				}
				active = i
			}
		}
		return active >= 0
	})
	endpoint := layout.Members()[active].OPCUA
	if endpoint == "" {
		t.Fatalf("the Active node %s serves no OPC UA", layout.Members()[active].ID)
	}

	// OPC UA: every demo tag reads Good with its configured type, and
	// the values move.
	testwait.For(t, 60*time.Second, "ServiceLevel 250 on the Active's OPC UA endpoint", func() bool {
		return serviceLevel(endpoint) == 250
	})
	ua1 := uaClient(t, endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	ns, err := ua1.FindNamespace(ctx, devsite.NamespaceURI)
	cancel()
	if err != nil {
		t.Fatalf("find the demo namespace: %v", err)
	}
	types := map[string]ua.TypeID{
		"Pump1.Running": ua.TypeIDBoolean, "Pump1.Speed": ua.TypeIDDouble, "Pump1.SpeedSP": ua.TypeIDDouble,
		"Pump1.Starts": ua.TypeIDInt32, "Pump1.Mode": ua.TypeIDString,
		"Tank1.Level": ua.TypeIDFloat, "Tank1.HighAlarm": ua.TypeIDBoolean, "Tank1.Batch": ua.TypeIDInt64,
	}
	for name, want := range types {
		node := ua.NewStringNodeID(ns, name)
		var last string
		testwait.ForDetail(t, 20*time.Second, name+" to read Good with its configured type "+want.String(), func() (bool, string) {
			dv, err := readValue(ua1, node)
			if err != nil {
				last = err.Error()
				return false, last
			}
			if dv.Value == nil {
				return false, dv.Status.Error()
			}
			last = fmt.Sprintf("%s %s %v", dv.Status, dv.Value.Type(), dv.Value.Value())
			return dv.Status == ua.StatusOK && dv.Value.Type() == want, last
		})
	}
	waitGoodChanging(t, ua1, ua.NewStringNodeID(ns, "Pump1.Starts"), 20*time.Second, "Pump1.Starts to move")
	waitGoodChanging(t, ua1, ua.NewStringNodeID(ns, "Pump1.Running"), 20*time.Second, "Pump1.Running to move")

	// Store-and-forward: a message enqueued with scadactl, and the
	// history rule's batches, reach the recording sink, bodies included.
	mark := fmt.Sprintf(`{"dev-test":%d}`, rand.Int64())
	ctl := exec.Command(bin.Scadactl, "sf", "enqueue", devsite.HistoryTarget, "--data", mark)
	ctl.Env = append(os.Environ(), "SCADACTL_ENDPOINTS="+strings.Join(layout.APIAddrs(), ","), "SCADACTL_CERTS="+layout.CertsDir())
	if out, err := ctl.CombinedOutput(); err != nil {
		t.Fatalf("scadactl sf enqueue: %v: %s", err, out)
	}
	testwait.For(t, 30*time.Second, "the enqueued message and a history batch in the sink's record", func() bool {
		var enqueued, history bool
		for _, d := range sinkRecord(t, layout.SinkRecord()) {
			enqueued = enqueued || bytes.Equal(d.Body, []byte(mark))
			history = history || bytes.Contains(d.Body, []byte(`"rule":"demo-history"`))
		}
		return enqueued && history
	})

	// The status page, for a browser on this machine: no client
	// certificate to import.
	resp, err := devHTTPClient(t, layout, "").Get("https://" + layout.HTTPAddr(0) + "/")
	if err != nil {
		t.Fatalf("status page: %v", err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(bytes.ToLower(page), []byte("<html")) {
		t.Fatalf("status page: %d %.300s", resp.StatusCode, page)
	}

	// Ctrl-C: the process ends on its own, cleanly, and frees every port.
	ua1.Close(context.Background())
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Fatalf("scadad --dev after SIGINT: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("scadad --dev still running 30 s after SIGINT")
	}
	for what, addr := range layout.Addrs() {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("after SIGINT, %s %s is still taken: %v", what, addr, err)
			continue
		}
		l.Close()
	}
	if !strings.Contains(fileTail(logPath, 200), "stopped") {
		t.Error("no node logged that it stopped")
	}
}

// freeDevBase picks a port base whose every dev-site port is free now.
func freeDevBase(t *testing.T, nodes int) int {
	t.Helper()
	for range 200 {
		l := devsite.Layout{Base: 15000 + rand.IntN(15000), Nodes: nodes}
		free := true
		for _, addr := range l.Addrs() {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			return l.Base
		}
	}
	t.Fatal("no free block of dev-site ports in 15000..30402")
	return 0
}

// devHTTPClient trusts the dev site's CA and presents the certificate
// name issued (none when empty).
func devHTTPClient(t *testing.T, layout devsite.Layout, name string) *http.Client {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(layout.CertsDir(), "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA certificate in the dev folder")
	}
	conf := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
	if name != "" {
		cert, err := tls.LoadX509KeyPair(filepath.Join(layout.CertsDir(), name+".crt"), filepath.Join(layout.CertsDir(), name+".key"))
		if err != nil {
			t.Fatal(err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	tr := &http.Transport{TLSClientConfig: conf}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: 5 * time.Second, Transport: tr}
}

func sinkRecord(t *testing.T, path string) []devsite.Delivery {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []devsite.Delivery
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 32<<20)
	for sc.Scan() {
		var d devsite.Delivery
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("sink record %s: %v", path, err)
		}
		out = append(out, d)
	}
	return out
}

// fileTail is the last n lines of the file at path.
func fileTail(path string, n int) string {
	b, _ := os.ReadFile(path)
	return tail(b, n)
}
