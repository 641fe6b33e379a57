package integration

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"testing"
)

// dashboard is the Grafana dashboard shipped for operators.
const dashboard = "../packaging/grafana/scadad-site.json"

// TestGrafanaDashboardNamesRealMetrics requires every scadad metric a
// query of the shipped dashboard (panels and template variables) uses to
// be on a real Active node's /metrics, as TestAlertRulesNameRealMetrics
// does for the alert rules, and every panel query to be filtered by the
// dashboard's site variable.
func TestGrafanaDashboardNamesRealMetrics(t *testing.T) {
	raw, err := os.ReadFile(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("parse %s: %v", dashboard, err)
	}
	metric := regexp.MustCompile(`\bscadad_[a-z0-9_]+`)
	seen := map[string]bool{}
	site := false
	for _, v := range d.Templating.List {
		site = site || v.Name == "site"
		for _, name := range metric.FindAllString(v.Definition, -1) {
			seen[name] = true
		}
	}
	if !site {
		t.Fatalf("%s has no site template variable", dashboard)
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if !regexp.MustCompile(`scadad_site_info\{site="\$site"\}`).MatchString(q.Expr) {
				t.Errorf("panel %q: query %q is not filtered by the site variable", p.Title, q.Expr)
			}
			for _, name := range metric.FindAllString(q.Expr, -1) {
				seen[name] = true
			}
		}
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) < 10 {
		t.Fatalf("found only %d scadad metrics in %s: %v", len(names), dashboard, names)
	}
	requireOnActiveMetrics(t, dashboard, names)
}
