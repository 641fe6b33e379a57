package siteconfig

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

const exampleFile = "../configs/site-example.yaml"

// minimalYAML is the smallest valid site: every default left out.
const minimalYAML = `version: 1
name: mini
connections:
  - name: gw
    kind: mxaccess
    mxaccess:
      endpoint: gw.local:5001
instances:
  - name: Pump1
    connection: gw
    attributes:
      - name: Speed
        type: double
        tag: Pump1.Speed
opcua:
  namespace_uri: urn:mini
  security:
    - policy: None
      mode: None
  identities:
    anonymous: true
`

func TestExampleSiteConfigValidates(t *testing.T) {
	data, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatalf("read example: %v", err)
	}
	s, err := Parse(data)
	if err != nil {
		t.Fatalf("example does not parse:\n%v", err)
	}
	// The brief's shape: two gateways, a few instances, two targets, a
	// history rule, OPC UA options.
	var gateways int
	for _, c := range s.Connections {
		if c.Kind == KindMxAccess {
			gateways++
		}
	}
	if gateways != 2 || len(s.Instances) < 2 || len(s.Targets) != 2 || len(s.History) != 1 || s.OPCUA.NamespaceURI == "" {
		t.Errorf("example lost its shape: %d gateways, %d instances, %d targets, %d history rules",
			gateways, len(s.Instances), len(s.Targets), len(s.History))
	}
}

func TestParseFillsDefaults(t *testing.T) {
	s, err := Parse([]byte(minimalYAML))
	if err != nil {
		t.Fatal(err)
	}
	m := s.Connections[0].MxAccess
	if m.CommandTimeout != DefaultMxCommandTimeout || m.InFlightCeiling != DefaultMxCommandTimeout+DefaultMxInFlightMargin ||
		m.BackoffFloor != DefaultMxBackoffFloor || m.BackoffMax != DefaultMxBackoffMax || !m.BulkSupervisory() {
		t.Errorf("mxaccess defaults not applied: %+v", m)
	}
	if s.OPCUA.Endpoint != DefaultServerEndpoint || s.OPCUA.MaxSessions != DefaultServerMaxSessions {
		t.Errorf("server defaults not applied: %+v", s.OPCUA)
	}
}

func TestParseDerivesCeilingFromCommandTimeout(t *testing.T) {
	s, err := Parse([]byte(strings.Replace(minimalYAML, "endpoint: gw.local:5001", "endpoint: gw.local:5001\n      command_timeout: 2m", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Connections[0].MxAccess.InFlightCeiling; got != 2*time.Minute+DefaultMxInFlightMargin {
		t.Errorf("in_flight_ceiling = %s, want command_timeout + %s", got, DefaultMxInFlightMargin)
	}
}

func TestParseKeepsExplicitFalse(t *testing.T) {
	s, err := Parse([]byte(strings.Replace(minimalYAML, "endpoint: gw.local:5001", "endpoint: gw.local:5001\n      prefer_bulk_supervisory: false", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if s.Connections[0].MxAccess.BulkSupervisory() {
		t.Error("an explicit prefer_bulk_supervisory: false was overridden by the default")
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // fragments the error must contain
	}{
		{"empty", "", []string{"empty document"}},
		{"blank", "  \n\t\n", []string{"empty document"}},
		{"comment only", "# nothing\n", []string{"version: missing"}},
		{"null document", "~\n", []string{"version: missing"}},
		{"no version", strings.Replace(minimalYAML, "version: 1\n", "", 1), []string{"version: missing"}},
		{"newer version with new fields", strings.Replace(minimalYAML, "version: 1", "version: 2\nfeature_x: on", 1),
			[]string{"version: unsupported 2"}},
		{"unknown top-level field", strings.Replace(minimalYAML, "name: mini", "name: mini\nhot_stanby: true", 1),
			[]string{"line 3", `unknown field "hot_stanby"`}},
		{"unknown nested field", strings.Replace(minimalYAML, "endpoint: gw.local:5001", "endpoint: gw.local:5001\n      command_timout: 5s", 1),
			[]string{"line 8", `unknown field "command_timout" (in a MxAccessConnection)`}},
		{"unknown field and invalid content, both listed", strings.Replace(strings.Replace(minimalYAML, "name: mini", "name: mini\nhot_stanby: true", 1), "tag: Pump1.Speed", "tag: ''", 1),
			[]string{`line 3: unknown field "hot_stanby"`, "instances[0].attributes[0].tag: empty"}},
		{"syntax error", strings.Replace(minimalYAML, "  - name: Pump1", "  - name: [Pump1", 1),
			[]string{"line"}},
		// libyaml reports a tab at the line before it; the line is still named.
		{"tab indentation", "version: 1\nname: x\n\tconnections: []\n", []string{"line 2", "tab character"}},
		{"duration without unit", strings.Replace(minimalYAML, "endpoint: gw.local:5001", "endpoint: gw.local:5001\n      command_timeout: 30", 1),
			[]string{"line 8", "time.Duration"}},
		{"wrong type", strings.Replace(minimalYAML, "anonymous: true", "anonymous: sometimes", 1),
			[]string{"line 21", "into bool"}},
		{"two documents", minimalYAML + "---\nversion: 1\n", []string{"line 22", "second YAML document"}},
		{"duplicate key", strings.Replace(minimalYAML, "name: mini", "name: mini\nname: maxi", 1),
			[]string{"line 3", "already defined"}},
		{"invalid content", strings.Replace(minimalYAML, "tag: Pump1.Speed", "tag: ''", 1),
			[]string{"instances[0].attributes[0].tag: empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("parsed: %+v", s)
			}
			if s != nil {
				t.Errorf("Parse returned a site with its error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseReturnsValidationErrorWithPaths(t *testing.T) {
	bad := strings.Replace(minimalYAML, "connection: gw", "connection: gw2", 1)
	bad = strings.Replace(bad, "type: double", "type: real", 1)
	_, err := Parse([]byte(bad))
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("want a *ValidationError, got %v", err)
	}
	got := problemsOf(t, err)
	want := []string{"instances[0].connection", "instances[0].attributes[0].type"}
	if !slices.Equal(got, want) {
		t.Fatalf("paths = %q, want %q", got, want)
	}
}

func TestDecodeRejectsOversizedInput(t *testing.T) {
	big := make([]byte, MaxArtifactBytes+1)
	if _, err := Decode(big); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("oversized input: %v", err)
	}
}

func TestTestdataSeeds(t *testing.T) {
	data, err := os.ReadFile("testdata/opcua-only.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(data); err != nil {
		t.Fatalf("opcua-only seed: %v", err)
	}
	data, err = os.ReadFile("testdata/broken.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var verr *ValidationError
	if _, err := Parse(data); !errors.As(err, &verr) || len(verr.Problems) < 10 {
		t.Fatalf("broken seed should list many problems at once, got %v", err)
	}
}

func TestParseRejectsAliasBomb(t *testing.T) {
	// Ten-fold nesting twelve deep, all inside a known key, so strict
	// decoding has to expand it: 10^12 nodes unless the decoder refuses.
	var b strings.Builder
	b.WriteString("version: 1\nconnections:\n  - &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 12; i++ {
		fmt.Fprintf(&b, "  - &a%d [", i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	start := time.Now()
	_, err := Parse([]byte(b.String()))
	if err == nil {
		t.Fatal("an alias bomb parsed")
	}
	if len(err.Error()) > 64<<10 {
		t.Errorf("the error is %d bytes long", len(err.Error()))
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("alias bomb took %s to reject", d)
	}
}
