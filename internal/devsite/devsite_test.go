package devsite

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/siteconfig"
)

func TestLayoutChecksNodesAndPorts(t *testing.T) {
	for _, l := range []Layout{{Base: DefaultBase, Nodes: 2}, {Base: 80, Nodes: 1}, {Base: 65300, Nodes: 1}} {
		if err := l.Check(); err == nil {
			t.Errorf("%+v: no error", l)
		}
	}
	l := Layout{Base: DefaultBase, Nodes: 3}
	if err := l.Check(); err != nil {
		t.Fatal(err)
	}
	if got := len(l.Addrs()); got != 3*3+2+2 {
		t.Errorf("%d addresses for three nodes, want 13 (no OPC UA on the witness): %v", got, l.Addrs())
	}
	m := l.Members()
	if !m[2].Witness || m[2].OPCUA != "" || m[0].OPCUA != "opc.tcp://127.0.0.1:7401" || m[1].APIAddr != "127.0.0.1:7202" {
		t.Errorf("members: %+v", m)
	}
}

// The demo site config is valid, and every node config of both sizes is.
func TestDemoSiteAndConfigsAreValid(t *testing.T) {
	for _, nodes := range []int{1, 3} {
		l := Layout{Dir: t.TempDir(), Base: DefaultBase, Nodes: nodes}
		if _, err := siteconfig.Parse(l.SiteConfig()); err != nil {
			t.Fatalf("demo site config: %v", err)
		}
		cfgs, err := l.Configs()
		if err != nil {
			t.Fatal(err)
		}
		if len(cfgs) != nodes {
			t.Fatalf("%d configs for %d nodes", len(cfgs), nodes)
		}
		for _, name := range append(l.NodeIDs(), Operator, Producer) {
			if _, err := os.Stat(filepath.Join(l.CertsDir(), name+".crt")); err != nil {
				t.Errorf("certificate of %s: %v", name, err)
			}
		}
		// A second start keeps the certificates.
		before, _ := os.ReadFile(filepath.Join(l.CertsDir(), "ca.crt"))
		if _, err := l.Configs(); err != nil {
			t.Fatal(err)
		}
		after, _ := os.ReadFile(filepath.Join(l.CertsDir(), "ca.crt"))
		if string(before) != string(after) {
			t.Error("a second start replaced the CA")
		}
	}
}

func TestSinkRecordsBodiesAndRefusesOversize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sink.jsonl")
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	s, err := OpenSink(path, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s)
	defer srv.Close()
	post := func(body string, id string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/historian", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(`{"v": 1}`, "a"); code != http.StatusNoContent {
		t.Fatalf("JSON delivery: %d", code)
	}
	if code := post("plain", "b"); code != http.StatusNoContent {
		t.Fatalf("text delivery: %d", code)
	}
	if code := post(strings.Repeat("x", maxSinkBody+1), "c"); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversize delivery: %d, want 413", code)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []Delivery
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var d Delivery
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatal(err)
		}
		got = append(got, d)
	}
	if len(got) != 2 || string(got[0].Body) != `{"v":1}` || got[0].ID != "a" || got[0].Path != "/historian" || !got[0].Time.Equal(now) ||
		got[1].Text != "plain" || got[1].Seq != 2 {
		t.Fatalf("record: %+v", got)
	}
}
