package siteconfig

import (
	"strings"
	"testing"
)

const alarmsYAML = minimalYAML + `targets:
  - name: historian
    url: http://127.0.0.1:9/alarms
alarms:
  history_target: historian
  sources:
    - connection: gw
      source: Pump1
  limits:
    - name: Pump1.Speed.Limit
      instance: Pump1
      attribute: Speed
      hi_hi: {limit: 95, severity: 900}
      hi: {limit: 80, severity: 700}
      lo: {limit: 5, severity: 400}
      deadband: 1.5
      on_delay: 2s
      message: pump speed
`

func TestAlarmsParseAndSurviveCanonical(t *testing.T) {
	s, err := Parse([]byte(alarmsYAML))
	if err != nil {
		t.Fatal(err)
	}
	a := s.Alarms
	if a.HistoryTarget != "historian" || len(a.Sources) != 1 || len(a.Limits) != 1 || a.Limits[0].HiHi.Severity != 900 || a.Limits[0].OnDelay.String() != "2s" {
		t.Fatalf("parsed alarms %+v", a)
	}
	c, err := Canonical(s)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(c)
	if err != nil {
		t.Fatalf("canonical form does not parse: %v\n%s", err, c)
	}
	if back.Alarms.Limits[0].Deadband != 1.5 || back.Alarms.Sources[0].Source != "Pump1" {
		t.Fatalf("alarms lost in the canonical form:\n%s", c)
	}
	cl := s.Clone()
	cl.Alarms.Limits[0].Hi.Limit = 1
	if s.Alarms.Limits[0].Hi.Limit != 80 {
		t.Fatal("Clone shares the limit levels")
	}
}

func TestAlarmsValidateNamesWhatIsWrong(t *testing.T) {
	for _, tc := range []struct{ from, to, want string }{
		{"history_target: historian", "history_target: nowhere", `alarms.history_target: unknown target "nowhere"`},
		{"    - connection: gw\n      source: Pump1", "    - connection: gx\n      source: Pump1", `alarms.sources[0].connection: unknown connection "gx"`},
		{"      source: Pump1", "      source: \"\"", `alarms.sources[0].source: empty`},
		{"      attribute: Speed", "      attribute: Nope", `alarms.limits[0].attribute: instance "Pump1" has no attribute "Nope"`},
		{"hi: {limit: 80, severity: 700}", "hi: {limit: 99, severity: 700}", `alarms.limits[0].hi_hi.limit: 95 must be above hi's 99`},
		{"severity: 900", "severity: 1001", `alarms.limits[0].hi_hi.severity: 1001 outside 1..1000`},
		{"deadband: 1.5", "deadband: -1", `alarms.limits[0].deadband: -1 must be a finite number >= 0`},
		{"on_delay: 2s", "on_delay: -2s", `alarms.limits[0].on_delay: -2s must be >= 0`},
	} {
		y := strings.Replace(alarmsYAML, tc.from, tc.to, 1)
		if y == alarmsYAML {
			t.Fatalf("%q not in the test YAML", tc.from)
		}
		_, err := Parse([]byte(y))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s -> %s: err %v, want %q", tc.from, tc.to, err, tc.want)
		}
	}
}
