package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// asRole runs scadactl against one node with the client certificate name.
func asRole(ctx context.Context, c *testcluster.Cluster, name string, n *testcluster.Node, args ...string) (string, string, int) {
	full := append([]string{"--cert", filepath.Join(c.Certs, name+".crt"), "--key", filepath.Join(c.Certs, name+".key"), "--cacert", filepath.Join(c.Certs, "ca.crt")}, args...)
	out, errs, code, err := c.Ctl(ctx, []*testcluster.Node{n}, full...)
	if err != nil {
		return out, err.Error(), -1
	}
	return out, errs, code
}

func issueClient(ctx context.Context, t *testing.T, c *testcluster.Cluster, name, role string) {
	t.Helper()
	if out, errs, code, err := c.Ctl(ctx, nil, "certs", "issue", "--dir", c.Certs, "--name", name, "--client", "--role", role); err != nil || code != 0 {
		t.Fatalf("certs issue %s --role %s: exit %d, %q %q, %v", name, role, code, out, errs, err)
	}
}

// TestViewerCannotWriteThroughActiveOrStandby: a viewer certificate reads
// but cannot fail over, deploy, discard or restore (exit 4,
// PermissionDenied), on the Active and on a Standby, which would forward;
// an operator fails over through the Standby, and the audit log names the
// operator and the node that forwarded, not the node alone.
func TestViewerCannotWriteThroughActiveOrStandby(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var standby *testcluster.Node
	for _, n := range c.Nodes {
		if !n.Witness && n != active {
			standby = n
		}
	}
	issueClient(ctx, t, c, "watcher", "viewer")
	issueClient(ctx, t, c, "shiftlead", "operator")

	site := filepath.Join(t.TempDir(), "site.yaml")
	if err := os.WriteFile(site, testcluster.SiteConfig("sec", map[string]string{"sink": "http://127.0.0.1:1/"}, 3), 0o644); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "backup.snap")
	if out, errs, code, err := c.Ctl(ctx, []*testcluster.Node{active}, "snapshot", "save", snap); err != nil || code != 0 {
		t.Fatalf("admin snapshot save: exit %d, %q %q, %v", code, out, errs, err)
	}

	for _, n := range []*testcluster.Node{active, standby} {
		if _, errs, code := asRole(ctx, c, "watcher", n, "status"); code != 0 {
			t.Errorf("viewer status on %s: exit %d, %q", n.ID, code, errs)
		}
		if _, errs, code := asRole(ctx, c, "watcher", n, "audit"); code != 0 {
			t.Errorf("viewer audit on %s: exit %d, %q", n.ID, code, errs)
		}
		for _, args := range [][]string{
			{"failover"},
			{"deploy", "push", site},
			{"sf", "discard", "--all", "--target", "sink", "--yes"},
			{"snapshot", "restore", snap, "--yes"},
		} {
			_, errs, code := asRole(ctx, c, "watcher", n, args...)
			if code != 4 || !strings.Contains(errs, "PermissionDenied") && !strings.Contains(errs, "role viewer") {
				t.Errorf("viewer %s on %s: exit %d, %q; want exit 4, PermissionDenied naming the role", strings.Join(args, " "), n.ID, code, errs)
			}
		}
		// An operator may not restore either: that is an admin's.
		if _, errs, code := asRole(ctx, c, "shiftlead", n, "snapshot", "restore", snap, "--yes"); code != 4 || !strings.Contains(errs, "needs admin") {
			t.Errorf("operator snapshot restore on %s: exit %d, %q; want exit 4 saying it needs admin", n.ID, code, errs)
		}
	}
	if out, _, code, _ := c.Ctl(ctx, nil, "deploy", "history"); code != 5 {
		t.Fatalf("deploy history after the viewer's refused pushes: exit %d, %q; want exit 5, nothing deployed", code, out)
	}

	if out, errs, code := asRole(ctx, c, "shiftlead", standby, "failover"); code != 0 {
		t.Fatalf("operator failover through the Standby %s: exit %d, %q %q", standby.ID, code, out, errs)
	}
	var audit struct{ Entries []*controlpb.AuditEntry }
	want := "shiftlead via " + standby.ID
	err := testwait.Poll(ctx, func() bool {
		out, _, code := asRole(ctx, c, "watcher", standby, "--output", "json", "audit")
		if code != 0 || json.Unmarshal([]byte(out), &audit.Entries) != nil {
			return false
		}
		for _, e := range audit.Entries {
			if e.Kind == "failover" && e.Actor == want {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("audit log after a failover through the Standby: %+v; want an entry by %q", audit.Entries, want)
	}
	for _, e := range audit.Entries {
		if strings.HasPrefix(e.Actor, "operator@") {
			t.Errorf("audit entry %+v names a node, not the caller", e)
		}
	}
}
