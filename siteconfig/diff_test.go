package siteconfig

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// summary flattens Changes to "kind what name" lines (plus changed field
// names) so cases can state the whole expected difference.
func summary(c Changes) []string {
	var out []string
	for _, f := range c.Site {
		out = append(out, "site "+f.Field)
	}
	add := func(what string, ch Change) {
		line := string(ch.Kind) + " " + what + " " + ch.Name
		if ch.Kind == Changed {
			var fields []string
			for _, f := range ch.Fields {
				fields = append(fields, f.Field)
			}
			line += " [" + strings.Join(fields, ",") + "]"
		}
		out = append(out, line)
	}
	for _, ch := range c.Connections {
		add("connection", ch)
	}
	for _, ic := range c.Instances {
		add("instance", ic.Change)
		for _, a := range ic.Attributes {
			add("attribute "+ic.Name+"/", a)
		}
	}
	for _, ch := range c.Targets {
		add("target", ch)
	}
	for _, ch := range c.History {
		add("history", ch)
	}
	for _, f := range c.OPCUA {
		out = append(out, "opcua "+f.Field)
	}
	return out
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name   string
		change func(s *Site)
		want   []string
	}{
		{"nothing", func(s *Site) {}, nil},
		{"order only", func(s *Site) {
			s.Instances[0], s.Instances[1] = s.Instances[1], s.Instances[0]
			s.Connections[0], s.Connections[1] = s.Connections[1], s.Connections[0]
		}, nil},
		{"hot standby", func(s *Site) { s.HotStandby = true }, []string{"site hot_standby"}},
		{"connection option", func(s *Site) { s.Connections[0].MxAccess.CommandTimeout = 90 * time.Second },
			[]string{"changed connection gw [mxaccess.command_timeout]"}},
		{"connection added", func(s *Site) {
			s.Connections = append(s.Connections, Connection{Name: "gw2", Kind: KindMxAccess, MxAccess: &MxAccessConnection{Endpoint: "gw2:1"}})
		}, []string{"added connection gw2"}},
		{"connection removed", func(s *Site) { s.Connections = s.Connections[:1] }, []string{"removed connection ua"}},
		{"instance moved to another connection", func(s *Site) { s.Instances[0].Connection = "ua" },
			[]string{"changed instance Pump1 [connection]"}},
		{"attribute tag", func(s *Site) { s.Instances[0].Attributes[0].Tag = "Pump1.Speed2" },
			[]string{"changed instance Pump1 []", "changed attribute Pump1/ Speed [tag]"}},
		{"attribute added and removed", func(s *Site) {
			s.Instances[0].Attributes[1] = Attribute{Name: "Torque", Type: TypeDouble, Tag: "Pump1.Torque"}
		}, []string{"changed instance Pump1 []", "removed attribute Pump1/ Running", "added attribute Pump1/ Torque"}},
		{"instance added", func(s *Site) {
			s.Instances = append(s.Instances, Instance{Name: "Pump2", Connection: "gw", Attributes: []Attribute{{Name: "A", Type: TypeBool, Tag: "P2.A"}}})
		}, []string{"added instance Pump2", "added attribute Pump2/ A"}},
		{"instance removed", func(s *Site) { s.Instances = s.Instances[:1] },
			[]string{"removed instance Skid", "removed attribute Skid/ Level"}},
		{"target header", func(s *Site) { s.Targets[0].Headers = map[string]string{"Authorization": "Bearer x"} },
			[]string{"changed target hist [headers.Authorization]"}},
		{"target renamed", func(s *Site) { s.Targets[0].Name = "hist2"; s.History[0].Target = "hist2" },
			[]string{"removed target hist", "added target hist2", "changed history h1 [target]"}},
		{"history selection", func(s *Site) {
			s.History[0].Select[0].Attributes = append(s.History[0].Select[0].Attributes, "Running")
		},
			[]string{"changed history h1 [select[0].attributes[0],select[0].attributes[1]]"}},
		{"server option", func(s *Site) { s.OPCUA.MaxSessions = 7 }, []string{"opcua max_sessions"}},
		{"default spelled out is no change", func(s *Site) { s.OPCUA.Endpoint = "" }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, new := validSite(), validSite()
			tt.change(new)
			got := summary(Diff(old, new))
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("diff = %q\nwant   %q", got, tt.want)
			}
			if empty := Diff(old, new).Empty(); empty != (len(tt.want) == 0) {
				t.Errorf("Empty() = %v", empty)
			}
		})
	}
}

func TestDiffFieldValues(t *testing.T) {
	old, new := validSite(), validSite()
	new.Connections[0].MxAccess.CommandTimeout = 90 * time.Second
	new.Instances[0].Attributes[0].Tag = "Pump1.Speed2"
	c := Diff(old, new)
	conn, ok := c.Connection("gw")
	if !ok || len(conn.Fields) != 1 {
		t.Fatalf("connection change = %+v", conn)
	}
	if f := conn.Fields[0]; f.Old != "1m0s" || f.New != "1m30s" {
		t.Errorf("field change = %+v", f)
	}
	in, ok := c.Instance("Pump1")
	if !ok || in.Attributes[0].Fields[0] != (FieldChange{Field: "tag", Old: `"Pump1.Speed"`, New: `"Pump1.Speed2"`}) {
		t.Errorf("instance change = %+v", in)
	}
	if _, ok := c.Instance("Skid"); ok {
		t.Error("an unchanged instance is listed")
	}
	if _, ok := c.Target("hist"); ok {
		t.Error("an unchanged target is listed")
	}
}

func TestDiffFromNothingAddsEverything(t *testing.T) {
	s := validSite()
	c := Diff(nil, s)
	if len(c.Connections) != 2 || len(c.Instances) != 2 || len(c.Targets) != 1 || len(c.History) != 1 {
		t.Fatalf("first deploy diff = %v", summary(c))
	}
	for _, ic := range c.Instances {
		if ic.Kind != Added || len(ic.Attributes) == 0 {
			t.Errorf("instance %s: %s with %d attributes", ic.Name, ic.Kind, len(ic.Attributes))
		}
	}
	if back := Diff(s, nil); len(back.Instances) != 2 || back.Instances[0].Kind != Removed {
		t.Errorf("diff to nothing = %v", summary(back))
	}
}

func TestDiffStringRendering(t *testing.T) {
	old, new := validSite(), validSite()
	new.Connections[0].MxAccess.CommandTimeout = 90 * time.Second
	new.Instances[0].Attributes[0].Tag = "Pump1.Speed2"
	new.Instances[0].Attributes = append(new.Instances[0].Attributes, Attribute{Name: "Torque", Type: TypeDouble, Tag: "Pump1.Torque"})
	new.Targets[0].Headers = map[string]string{"Authorization": "Bearer secret-token"}
	new.Instances = new.Instances[:1]
	got := Diff(old, new).String()
	want := `~ connection gw
    mxaccess.command_timeout: 1m0s -> 1m30s
~ instance Pump1
    ~ attribute Speed
        tag: "Pump1.Speed" -> "Pump1.Speed2"
    + attribute Torque
        + type: "double"
        + tag: "Pump1.Torque"
        + writable: false
        + allow_non_finite: false
- instance Skid
    - connection: "ua"
    - attribute Level
~ target hist
    + headers.Authorization: (redacted sha256:`
	if !strings.HasPrefix(got, want) {
		t.Fatalf("rendering:\n%s\nwant prefix:\n%s", got, want)
	}
	if strings.Contains(got, "secret-token") {
		t.Fatal("a header value was rendered in clear")
	}
	if s := Diff(old, old).String(); s != "no changes\n" {
		t.Errorf("empty diff renders as %q", s)
	}
}
