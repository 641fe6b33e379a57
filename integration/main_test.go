package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testcluster"
)

var bin *testcluster.Binaries

func TestMain(m *testing.M) {
	var err error
	bin, err = testcluster.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	bin.Remove()
	os.Exit(code)
}

// newCluster makes a cluster that is killed and removed when t ends, with
// the nodes' last log lines printed if t failed.
func newCluster(t *testing.T, o testcluster.Options) *testcluster.Cluster {
	t.Helper()
	o.Dir = t.TempDir()
	c, err := testcluster.New(bin, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		for _, n := range c.Nodes {
			if report := n.RaceReport(); report != "" {
				t.Errorf("%s found a data race:\n%s", n.ID, report)
			}
		}
		if t.Failed() {
			for _, n := range c.Nodes {
				t.Logf("---- last log lines of %s ----\n%s", n.ID, n.LogStory(40))
			}
		}
	})
	return c
}

func start(t *testing.T, c *testcluster.Cluster, nodes ...*testcluster.Node) {
	t.Helper()
	if len(nodes) == 0 {
		nodes = c.Nodes
	}
	for _, n := range nodes {
		if err := c.Start(n); err != nil {
			t.Fatal(err)
		}
	}
}

func waitOneActive(t *testing.T, c *testcluster.Cluster, timeout time.Duration) *testcluster.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	n, err := c.WaitOneActive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// otherVoter is the voter that is not active (the Standby of two voters
// and a witness).
func otherVoter(t *testing.T, c *testcluster.Cluster, active *testcluster.Node) *testcluster.Node {
	t.Helper()
	for _, n := range c.Nodes {
		if n != active && !n.Witness {
			return n
		}
	}
	t.Fatalf("no voter besides %s", active.ID)
	return nil
}

func ctlJSON(t *testing.T, c *testcluster.Cluster, nodes []*testcluster.Node, v any, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.CtlJSON(ctx, nodes, v, args...); err != nil {
		t.Fatal(err)
	}
}

// scrapeMetrics is n's /metrics page.
func scrapeMetrics(n *testcluster.Node) (string, error) {
	resp, err := http.Get("http://" + n.HTTPAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// metricLine is the value of series (a name, with its labels if it has
// any, as /metrics writes them) on n's /metrics, or "".
func metricLine(n *testcluster.Node, series string) string {
	body, err := scrapeMetrics(n)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// completeSnapshotFiles are the files called name in the raft snapshots
// under folder that raft has finished: it writes a snapshot into
// "<id>.tmp" and renames the folder once it is whole.
func completeSnapshotFiles(folder, name string) []string {
	m, _ := filepath.Glob(filepath.Join(folder, "*", name))
	return slices.DeleteFunc(m, func(p string) bool { return strings.HasSuffix(filepath.Dir(p), ".tmp") })
}
