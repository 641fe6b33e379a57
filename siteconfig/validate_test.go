package siteconfig

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// validSite is a small site that validates; each case breaks one thing.
func validSite() *Site {
	s := &Site{
		Version: CurrentVersion,
		Name:    "test-site",
		Connections: []Connection{
			{Name: "gw", Kind: KindMxAccess, MxAccess: &MxAccessConnection{Endpoint: "gw.local:5001"}},
			{Name: "ua", Kind: KindOPCUA, OPCUA: &OPCUAConnection{Endpoint: "opc.tcp://skid.local:4840"}},
		},
		Instances: []Instance{
			{Name: "Pump1", Connection: "gw", Attributes: []Attribute{
				{Name: "Speed", Type: TypeDouble, Tag: "Pump1.Speed"},
				{Name: "Running", Type: TypeBool, Tag: "Pump1.Running"},
			}},
			{Name: "Skid", Connection: "ua", Attributes: []Attribute{
				{Name: "Level", Type: TypeFloat, Tag: "ns=2;s=Skid.Level"},
			}},
		},
		Targets: []Target{{Name: "hist", URL: "https://hist.local/api"}},
		History: []HistoryRule{{
			Name: "h1", Target: "hist",
			Select: []HistorySelector{{Instance: "Pump1", Attributes: []string{"Speed"}}},
		}},
		OPCUA: OPCUAServer{
			NamespaceURI: "urn:test",
			Security:     []SecurityPair{{Policy: "None", Mode: "None"}},
			Identities:   ServerIdentities{Anonymous: true},
		},
	}
	s.ApplyDefaults()
	return s
}

func problemsOf(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("error is %T, not *ValidationError: %v", err, err)
	}
	out := make([]string, len(verr.Problems))
	for i, p := range verr.Problems {
		out[i] = p.Path
	}
	return out
}

func TestValidSiteValidates(t *testing.T) {
	if err := validSite().Validate(); err != nil {
		t.Fatalf("valid site: %v", err)
	}
}

func TestValidateReportsPath(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(s *Site)
		paths  []string
		msg    string // a fragment of the first problem's message
	}{
		{"version", func(s *Site) { s.Version = 2 }, []string{"version"}, "unsupported 2"},
		{"site name empty", func(s *Site) { s.Name = "" }, []string{"name"}, "empty"},
		{"site name chars", func(s *Site) { s.Name = "a b" }, []string{"name"}, "letters"},
		{"no connections", func(s *Site) {
			s.Connections = nil
			s.Instances = nil
			s.History = nil
		}, []string{"connections", "instances"}, "empty"},
		{"duplicate connection", func(s *Site) { s.Connections[1].Name = "gw"; s.Instances[1].Connection = "gw" },
			[]string{"connections[1].name"}, `duplicate "gw" (also connections[0])`},
		{"connection kind", func(s *Site) { s.Connections[0].Kind = "modbus" },
			[]string{"connections[0].kind"}, `unknown "modbus"`},
		{"kind without block", func(s *Site) { s.Connections[0].MxAccess = nil },
			[]string{"connections[0].mxaccess"}, "missing"},
		{"both blocks", func(s *Site) {
			s.Connections[1].MxAccess = &MxAccessConnection{Endpoint: "x:1", CommandTimeout: time.Second, InFlightCeiling: 2 * time.Second, BackoffFloor: time.Second, BackoffMax: time.Second, PreferBulkSupervisory: new(bool)}
		},
			[]string{"connections[1].mxaccess"}, "set on a connection of kind"},
		{"mx endpoint", func(s *Site) { s.Connections[0].MxAccess.Endpoint = "gw.local" },
			[]string{"connections[0].mxaccess.endpoint"}, "not host:port"},
		{"mx endpoint port", func(s *Site) { s.Connections[0].MxAccess.Endpoint = "gw.local:70000" },
			[]string{"connections[0].mxaccess.endpoint"}, "port must be"},
		{"mx negative timeout", func(s *Site) { s.Connections[0].MxAccess.CommandTimeout = -time.Second },
			[]string{"connections[0].mxaccess.command_timeout"}, "must be positive"},
		{"ceiling below timeout", func(s *Site) { s.Connections[0].MxAccess.InFlightCeiling = 30 * time.Second },
			[]string{"connections[0].mxaccess.in_flight_ceiling"}, "must exceed command_timeout"},
		{"backoff max below floor", func(s *Site) { s.Connections[0].MxAccess.BackoffMax = time.Second },
			[]string{"connections[0].mxaccess.backoff_max"}, "below backoff_floor"},
		{"absurd duration", func(s *Site) { s.Connections[0].MxAccess.BackoffMax = 48 * time.Hour },
			[]string{"connections[0].mxaccess.backoff_max"}, "longer than"},
		{"ua endpoint scheme", func(s *Site) { s.Connections[1].OPCUA.Endpoint = "http://skid.local" },
			[]string{"connections[1].opcua.endpoint"}, "opc.tcp"},
		{"ua policy", func(s *Site) { s.Connections[1].OPCUA.SecurityPolicy = "Basic512" },
			[]string{"connections[1].opcua.security_policy"}, `unknown "Basic512"`},
		{"ua policy mode mismatch", func(s *Site) { s.Connections[1].OPCUA.SecurityMode = "Sign" },
			[]string{"connections[1].opcua.security_mode", "connections[1].opcua.certificate_file", "connections[1].opcua.private_key_file"}, "does not go with"},
		{"ua server certificate without security", func(s *Site) { s.Connections[1].OPCUA.ServerCertificateFile = "/etc/scadad/skid.der" },
			[]string{"connections[1].opcua.server_certificate_file"}, "exchanges no certificate"},
		{"ua username identity", func(s *Site) { s.Connections[1].OPCUA.Identity = ClientIdentity{Type: IdentityUsername} },
			[]string{"connections[1].opcua.identity.username", "connections[1].opcua.identity.password_file"}, "empty"},
		{"ua identity type", func(s *Site) { s.Connections[1].OPCUA.Identity.Type = "x509" },
			[]string{"connections[1].opcua.identity.type"}, `unknown "x509"`},
		{"instance connection unknown", func(s *Site) { s.Instances[0].Connection = "nope" },
			[]string{"instances[0].connection"}, `unknown connection "nope"`},
		{"instance without attributes", func(s *Site) { s.Instances[1].Attributes = nil },
			[]string{"instances[1].attributes"}, "empty"},
		{"duplicate instance", func(s *Site) { s.Instances[1].Name = "Pump1" },
			[]string{"instances[1].name"}, `duplicate "Pump1" (also instances[0])`},
		{"duplicate attribute", func(s *Site) { s.Instances[0].Attributes[1].Name = "Speed" },
			[]string{"instances[0].attributes[1].name"}, `duplicate "Speed" (also instances[0].attributes[0])`},
		{"attribute tag empty", func(s *Site) { s.Instances[0].Attributes[1].Tag = "" },
			[]string{"instances[0].attributes[1].tag"}, "empty"},
		{"eu_range on a bool", func(s *Site) { s.Instances[0].Attributes[1].EURange = &Range{Low: 0, High: 1} },
			[]string{"instances[0].attributes[1].eu_range"}, "only numeric attributes"},
		{"eu_range upside down", func(s *Site) { s.Instances[0].Attributes[0].EURange = &Range{Low: 10, High: 10} },
			[]string{"instances[0].attributes[0].eu_range"}, "low 10 must be below high 10"},
		{"eu_range not finite", func(s *Site) { s.Instances[0].Attributes[0].EURange = &Range{Low: math.Inf(-1), High: 10} },
			[]string{"instances[0].attributes[0].eu_range"}, "must be finite"},
		{"attribute type", func(s *Site) { s.Instances[0].Attributes[0].Type = "decimal" },
			[]string{"instances[0].attributes[0].type"}, `unknown "decimal"`},
		{"opcua tag must be NodeId", func(s *Site) { s.Instances[1].Attributes[0].Tag = "Skid.Level" },
			[]string{"instances[1].attributes[0].tag"}, "not an OPC UA NodeId"},
		{"opcua tag bad namespace", func(s *Site) { s.Instances[1].Attributes[0].Tag = "ns=x;s=Skid.Level" },
			[]string{"instances[1].attributes[0].tag"}, "not an OPC UA NodeId"},
		{"opcua tag numeric id", func(s *Site) { s.Instances[1].Attributes[0].Tag = "ns=2;i=abc" },
			[]string{"instances[1].attributes[0].tag"}, "not an OPC UA NodeId"},
		{"attribute connection override unknown", func(s *Site) { s.Instances[0].Attributes[0].Connection = "nope" },
			[]string{"instances[0].attributes[0].connection"}, "unknown connection"},
		{"attribute override to opcua checks NodeId", func(s *Site) { s.Instances[0].Attributes[0].Connection = "ua" },
			[]string{"instances[0].attributes[0].tag"}, "not an OPC UA NodeId"},
		{"target url", func(s *Site) { s.Targets[0].URL = "ftp://hist.local" },
			[]string{"targets[0].url"}, "http or https"},
		{"target url host", func(s *Site) { s.Targets[0].URL = "https:///path" },
			[]string{"targets[0].url"}, "no host"},
		{"target reserved header", func(s *Site) { s.Targets[0].Headers = map[string]string{"Idempotency-Key": "x"} },
			[]string{"targets[0].headers.Idempotency-Key"}, "set by the delivery"},
		{"target bad header", func(s *Site) { s.Targets[0].Headers = map[string]string{"Bad Name": "x", "Ok": "a\nb"} },
			[]string{"targets[0].headers.Bad Name", "targets[0].headers.Ok"}, "not a valid header name"},
		{"target attempts", func(s *Site) { s.Targets[0].MaxAttempts = -1 },
			[]string{"targets[0].max_attempts"}, "outside"},
		{"target payload", func(s *Site) { s.Targets[0].MaxPayloadBytes = 1 << 30 },
			[]string{"targets[0].max_payload_bytes"}, "outside"},
		{"target window", func(s *Site) { s.Targets[0].MaxInFlight = 65 },
			[]string{"targets[0].max_in_flight"}, "outside"},
		{"target cap", func(s *Site) { s.Targets[0].MaxPending = -5 },
			[]string{"targets[0].max_pending"}, "negative"},
		{"target park_on code", func(s *Site) { s.Targets[0].ParkOn = []string{"400", "4x", "600"} },
			[]string{"targets[0].park_on[1]", "targets[0].park_on[2]"}, "not an HTTP status code"},
		{"target batch", func(s *Site) { s.Targets[0].BatchMaxMessages, s.Targets[0].BatchMaxBytes = 10001, -1 },
			[]string{"targets[0].batch_max_messages", "targets[0].batch_max_bytes"}, "outside"},
		{"target batch format", func(s *Site) { s.Targets[0].BatchFormat = "xml" },
			[]string{"targets[0].batch_format"}, `unknown "xml"`},
		{"postgres target with http fields", func(s *Site) {
			s.Targets[0].Kind = TargetPostgres
			s.Targets[0].Postgres = &PostgresTarget{DSN: "postgres://scadad@db/plant", Table: "history"}
		},
			[]string{"targets[0].url"}, "not for kind postgres"},
		{"postgres target password in dsn", func(s *Site) {
			s.Targets[0] = Target{Name: "db", Kind: TargetPostgres, Timeout: time.Second, BackoffFloor: time.Second, BackoffMax: time.Second,
				MaxPayloadBytes: 100, MaxInFlight: 1, Postgres: &PostgresTarget{DSN: "host=db user=s password=secret", Table: "Hist-1"}}
			s.History = nil
		},
			[]string{"targets[0].postgres.dsn", "targets[0].postgres.table"}, "holds a password"},
		{"postgres target without settings", func(s *Site) {
			s.Targets[0] = Target{Name: "db", Kind: TargetPostgres, Timeout: time.Second, BackoffFloor: time.Second, BackoffMax: time.Second, MaxPayloadBytes: 100, MaxInFlight: 1}
			s.History = nil
		},
			[]string{"targets[0].postgres"}, "missing"},
		{"sparkplug target needs sparkplug rules", func(s *Site) {
			s.Targets[0] = Target{Name: "hist", Kind: TargetMQTT, Timeout: time.Second, BackoffFloor: time.Second, BackoffMax: time.Second, MaxPayloadBytes: 100, MaxInFlight: 1,
				MQTT: &MQTTTarget{Broker: "mqtt://b:1883", Topic: "t", Sparkplug: &SparkplugNode{GroupID: "plant/1", EdgeNode: "scadad"}}}
		},
			[]string{"targets[0].mqtt.topic", "targets[0].mqtt.sparkplug.group_id", "history[0].format"}, "Sparkplug"},
		{"sparkplug format needs a sparkplug target", func(s *Site) { s.History[0].Format = HistorySparkplug },
			[]string{"history[0].format"}, "not a Sparkplug edge node"},
		{"mqtt protocol", func(s *Site) {
			s.Targets[0] = Target{Name: "hist", Kind: TargetMQTT, Timeout: time.Second, BackoffFloor: time.Second, BackoffMax: time.Second, MaxPayloadBytes: 100, MaxInFlight: 1,
				MQTT: &MQTTTarget{Broker: "mqtt://b:1883", Topic: "t", Protocol: "3"}}
		},
			[]string{"targets[0].mqtt.protocol"}, `"3": want 5 or 3.1.1`},
		{"history format", func(s *Site) { s.History[0].Format = "xml" },
			[]string{"history[0].format"}, `unknown "xml"`},
		{"target kind", func(s *Site) { s.Targets[0].Kind = "kafka" },
			[]string{"targets[0].kind"}, `unknown "kafka"`},
		{"target park_on none with others", func(s *Site) { s.Targets[0].ParkOn = []string{"none", "4xx"} },
			[]string{"targets[0].park_on[0]"}, "only entry"},
		{"target ca_file on http", func(s *Site) {
			s.Targets[0].URL = "http://hist.local/in"
			s.Targets[0].CAFile = "/etc/scadad/hist-ca.pem"
		},
			[]string{"targets[0].ca_file"}, "only for an https url"},
		{"duplicate target", func(s *Site) { s.Targets = append(s.Targets, s.Targets[0]) },
			[]string{"targets[1].name"}, `duplicate "hist"`},
		{"history target unknown", func(s *Site) { s.History[0].Target = "nope" },
			[]string{"history[0].target"}, `unknown target "nope"`},
		{"history instance unknown", func(s *Site) { s.History[0].Select[0].Instance = "nope" },
			[]string{"history[0].select[0].instance"}, `unknown instance "nope"`},
		{"history attribute unknown", func(s *Site) { s.History[0].Select[0].Attributes = []string{"Speed", "Torque"} },
			[]string{"history[0].select[0].attributes[1]"}, `has no attribute "Torque"`},
		{"history deadband on bool", func(s *Site) {
			s.History[0].Deadband = 1
			s.History[0].Select[0].Attributes = []string{"Running"}
		}, []string{"history[0].select[0].attributes[0]"}, "not numeric"},
		{"history deadband NaN", func(s *Site) { s.History[0].Deadband = math.NaN() },
			[]string{"history[0].deadband"}, "finite"},
		{"history sample without interval", func(s *Site) { s.History[0].Mode = HistorySample },
			[]string{"history[0].sample_interval"}, "must be positive"},
		{"history sample too fast", func(s *Site) {
			s.History[0].Mode = HistorySample
			s.History[0].SampleInterval = time.Millisecond
		}, []string{"history[0].sample_interval"}, "below"},
		{"history interval on change", func(s *Site) { s.History[0].SampleInterval = time.Second },
			[]string{"history[0].sample_interval"}, "only for mode sample"},
		{"history mode", func(s *Site) { s.History[0].Mode = "always" },
			[]string{"history[0].mode"}, `unknown "always"`},
		{"history no select", func(s *Site) { s.History[0].Select = nil },
			[]string{"history[0].select"}, "empty"},
		{"history duplicate selector", func(s *Site) { s.History[0].Select = append(s.History[0].Select, HistorySelector{Instance: "Pump1"}) },
			[]string{"history[0].select[1].instance"}, "duplicate"},
		{"server namespace", func(s *Site) { s.OPCUA.NamespaceURI = "plant" },
			[]string{"opcua.namespace_uri"}, "absolute URI"},
		{"server security empty", func(s *Site) { s.OPCUA.Security = nil },
			[]string{"opcua.security"}, "empty"},
		{"server security duplicate", func(s *Site) { s.OPCUA.Security = append(s.OPCUA.Security, s.OPCUA.Security[0]) },
			[]string{"opcua.security[1]"}, "duplicate None/None"},
		{"server security pair", func(s *Site) { s.OPCUA.Security[0].Mode = "SignAndEncrypt" },
			[]string{"opcua.security[0].mode"}, "does not go with"},
		{"server no identity", func(s *Site) { s.OPCUA.Identities.Anonymous = false },
			[]string{"opcua.identities"}, "no identity accepted"},
		{"server anonymous writes without anonymous sessions", func(s *Site) {
			s.OPCUA.Identities.AnonymousCanWrite = true
			s.OPCUA.Identities.Anonymous = false
			s.OPCUA.Identities.Users = []ServerUser{{Username: "op", PasswordFile: "/p"}}
		}, []string{"opcua.identities.anonymous_can_write"}, "not accepted"},
		{"server duplicate user", func(s *Site) {
			s.OPCUA.Identities.Users = []ServerUser{{Username: "op", PasswordFile: "/p"}, {Username: "op"}}
		}, []string{"opcua.identities.users[1].username", "opcua.identities.users[1].password_file"}, "duplicate"},
		{"server sessions", func(s *Site) { s.OPCUA.MaxSessions = 0 },
			[]string{"opcua.max_sessions"}, "outside"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSite()
			tt.break_(s)
			err := s.Validate()
			got := problemsOf(t, err)
			if !slices.Equal(got, tt.paths) {
				t.Fatalf("problem paths = %q, want %q\n%v", got, tt.paths, err)
			}
			var verr *ValidationError
			errors.As(err, &verr)
			if !strings.Contains(verr.Problems[0].Msg, tt.msg) {
				t.Errorf("first problem %q does not say %q", verr.Problems[0], tt.msg)
			}
		})
	}
}

func TestValidateReportsEveryProblemAtOnce(t *testing.T) {
	s := validSite()
	s.Name = ""
	s.Connections[0].MxAccess.Endpoint = ""
	s.Instances[0].Attributes[1].Tag = ""
	s.Instances[1].Connection = "nope"
	s.Targets[0].Timeout = 0
	s.History[0].Target = "gone"
	s.OPCUA.NamespaceURI = ""
	err := s.Validate()
	want := []string{
		"name",
		"connections[0].mxaccess.endpoint",
		"instances[0].attributes[1].tag",
		"instances[1].connection",
		"targets[0].timeout",
		"history[0].target",
		"opcua.namespace_uri",
	}
	if got := problemsOf(t, err); !slices.Equal(got, want) {
		t.Fatalf("paths = %q, want %q", got, want)
	}
	// Error() lists them all, one per line, after a count.
	text := err.Error()
	if !strings.HasPrefix(text, "invalid site config: 7 problems\n") {
		t.Errorf("Error() header: %q", text)
	}
	for _, p := range want {
		if !strings.Contains(text, "\n  "+p+": ") {
			t.Errorf("Error() does not list %s:\n%s", p, text)
		}
	}
}

func TestValidateCapsTheProblemList(t *testing.T) {
	s := Generate(3, 600)
	for i := range s.Instances {
		for j := range s.Instances[i].Attributes {
			s.Instances[i].Attributes[j].Tag = ""
		}
	}
	var verr *ValidationError
	if !errors.As(s.Validate(), &verr) {
		t.Fatal("want a *ValidationError")
	}
	if len(verr.Problems) != maxProblemsReported || verr.Truncated != 1800-maxProblemsReported {
		t.Fatalf("listed %d, truncated %d; want %d and %d", len(verr.Problems), verr.Truncated, maxProblemsReported, 1800-maxProblemsReported)
	}
	if !strings.Contains(verr.Error(), "1800 problems") || !strings.Contains(verr.Error(), "and 800 more") {
		t.Errorf("Error() does not count the truncated problems: %.200s", verr.Error())
	}
}

func TestValidateNilSite(t *testing.T) {
	var s *Site
	if err := s.Validate(); err == nil {
		t.Fatal("a nil site validated")
	}
}

func TestValidateWithoutDefaultsFails(t *testing.T) {
	// A site built in Go without ApplyDefaults has zero durations: they
	// must not reach a worker as "retry immediately".
	s := validSite()
	s.Connections[0].MxAccess = &MxAccessConnection{Endpoint: "gw.local:5001"}
	got := problemsOf(t, s.Validate())
	want := []string{
		"connections[0].mxaccess.command_timeout",
		"connections[0].mxaccess.in_flight_ceiling",
		"connections[0].mxaccess.backoff_floor",
		"connections[0].mxaccess.backoff_max",
		"connections[0].mxaccess.prefer_bulk_supervisory",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paths = %q, want %q", got, want)
	}
}

func TestCheckNodeID(t *testing.T) {
	tests := []struct {
		tag string
		ok  bool
	}{
		{"ns=2;s=Boiler1.Level", true},
		{"ns=0;i=2258", true},
		{"nsu=urn:skid:boiler;s=Level", true},
		{"ns=3;g=5ce9dbce-5d79-434c-9ac3-1cfba9a6e92c", true},
		{"Boiler1.Level", false},
		{"ns=2;Boiler1.Level", false},
		{"nsu=;s=Level", false},
		{"ns=70000;s=Level", false},
		{"ns=2;i=-1", false},
		{"ns=2;g=not-a-guid", false},
	}
	for _, tt := range tests {
		if err := checkNodeID(tt.tag); (err == nil) != tt.ok {
			t.Errorf("checkNodeID(%q) = %v, want ok=%v", tt.tag, err, tt.ok)
		}
	}
}
