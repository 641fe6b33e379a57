package integration

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// alertRules is the rules file shipped for operators.
const alertRules = "../packaging/prometheus/scadad-alerts.yml"

// TestAlertRulesNameRealMetrics requires every scadad metric the shipped
// alert rules use to be on a real Active node's /metrics once the site has
// what the rules watch: a gateway connection, OPC UA servers, an OPC UA client connection
// (to an upstream that is not there), a target that takes deliveries and
// one that refuses them. A renamed metric or label-less series would leave
// an alert that can never fire; this catches it. The rules' logic is
// tested by promtool (make alerts-test).
func TestAlertRulesNameRealMetrics(t *testing.T) {
	names := alertMetricNames(t, alertRules)
	if len(names) < 8 {
		t.Fatalf("found only %d scadad metrics in %s: %v", len(names), alertRules, names)
	}

	requireOnActiveMetrics(t, alertRules, names)
}

// requireOnActiveMetrics starts a site with what the shipped rules and
// dashboards watch and waits until every one of names has a sample on the
// Active's /metrics; source says whose names they are.
func requireOnActiveMetrics(t *testing.T, source string, names []string) {
	t.Helper()
	sim := startSim(t)
	sink := startSink(t)
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, OPCUA: true, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	noUpstream, err := testcluster.DeadAddr()
	if err != nil {
		t.Fatal(err)
	}
	site := string(testcluster.SiteConfigGateway("alerts", sim.Addr, map[string]string{"up": sink.URL, "down": "http://127.0.0.1:9/x"}, 1000))
	site = strings.Replace(site, "instances:\n", `  - name: plc
    kind: opcua
    opcua:
      endpoint: opc.tcp://`+noUpstream+`
      backoff_floor: 100ms
      backoff_max: 1s
instances:
  - name: Remote
    connection: plc
    attributes:
      - {name: Level, type: double, tag: "ns=1;s=Tank.Level"}
`, 1)
	deploySite(t, c, []byte(site))
	for _, target := range []string{"up", "down"} {
		if !enqueue(active, target, "alerts-"+target, []byte(`{"v":1}`)) {
			t.Fatalf("enqueue to %s was not acknowledged", target)
		}
	}

	var missing []string
	testwait.For(t, 30*time.Second, "every metric "+source+" uses on the Active's /metrics", func() bool {
		body, err := scrapeMetrics(active)
		if err != nil {
			return false
		}
		missing = missing[:0]
		for _, name := range names {
			// A sample line, not only HELP/TYPE: "name{" or "name ".
			if !strings.Contains(body, "\n"+name+"{") && !strings.Contains(body, "\n"+name+" ") {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			t.Logf("not yet on /metrics: %v", missing)
		}
		return len(missing) == 0
	})
	// The site label the rules and dashboards group by is the deployed
	// site config's name.
	if v := metricLine(active, `scadad_site_info{site="alerts"}`); v != "1" {
		t.Fatalf(`scadad_site_info{site="alerts"} on the Active is %q, want 1`, v)
	}
}

// alertMetricNames returns the scadad_* metric names used by the rules'
// expressions, sorted and once each.
func alertMetricNames(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	metric := regexp.MustCompile(`\bscadad_[a-z0-9_]+`)
	seen := map[string]bool{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("%s: group %s has a rule without alert or expr: %+v", path, g.Name, r)
			}
			for _, name := range metric.FindAllString(r.Expr, -1) {
				seen[name] = true
			}
		}
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
