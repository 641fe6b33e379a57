package nodeconfig

import (
	"strings"
	"testing"
	"time"
)

const valid = `
node_id: node-a
data_dir: /var/lib/scadad
cluster:
  mode: witness
  members:
    - {id: node-a, raft_addr: "127.0.0.1:7101", api_addr: "127.0.0.1:7201"}
    - {id: node-b, raft_addr: "127.0.0.1:7102", api_addr: "127.0.0.1:7202"}
    - {id: witness, raft_addr: "127.0.0.1:7103", api_addr: "127.0.0.1:7203", witness: true}
tls: {ca: ca.crt, cert: node-a.crt, key: node-a.key}
`

func TestParseValidAppliesDefaults(t *testing.T) {
	c, err := Parse([]byte(valid))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if c.Cluster.RaftBind != "127.0.0.1:7101" || c.API.Listen != "127.0.0.1:7201" {
		t.Errorf("listeners not defaulted from the member entry: raft %q api %q", c.Cluster.RaftBind, c.API.Listen)
	}
	if c.Cluster.OverrideAfter.D() != 10*time.Second {
		t.Errorf("override_after default = %s, want 10s", c.Cluster.OverrideAfter.D())
	}
	if p, ok := c.Peer(); !ok || p.ID != "node-b" {
		t.Errorf("Peer() = %v %v, want node-b", p, ok)
	}
	if c.IsWitness() {
		t.Error("node-a reported as witness")
	}
	if c.Runtime.GCPercent != DefaultGCPercent || c.Runtime.MemoryLimitMiB != DefaultMemoryLimitMiB {
		t.Errorf("runtime defaults = %+v, want gc_percent %d, memory_limit_mib %d", c.Runtime, DefaultGCPercent, DefaultMemoryLimitMiB)
	}
	if c.HTTP.Connections != (ConnLimits{1024, 256}) || c.API.Connections != (ConnLimits{256, 64}) || c.Cluster.RaftConnections != (ConnLimits{128, 32}) {
		t.Errorf("connection limits http %+v api %+v raft %+v", c.HTTP.Connections, c.API.Connections, c.Cluster.RaftConnections)
	}
	if c.Raft.LogStore != "auto" {
		t.Errorf("raft.log_store default %q, want auto", c.Raft.LogStore)
	}
	if c.HTTP.MaxBodyBytesInFlight != 64<<20 {
		t.Errorf("http.max_body_bytes_in_flight default %d", c.HTTP.MaxBodyBytesInFlight)
	}
	small, err := Parse([]byte(valid + "http: {max_connections: 100}\n"))
	if err != nil || small.HTTP.Connections != (ConnLimits{100, 100}) {
		t.Errorf("a total below the per-address default: %+v, %v (want the per-address bound lowered to it)", small.HTTP.Connections, err)
	}
}

func TestParseNamesTheBadField(t *testing.T) {
	tests := []struct {
		name    string
		replace [2]string
		want    []string
	}{
		{"bad mode", [2]string{"mode: witness", "mode: quorum"}, []string{"cluster.mode", `"quorum"`}},
		{"unknown field", [2]string{"data_dir:", "datadir:"}, []string{"datadir (line 3): unknown field"}},
		{"missing node id", [2]string{"node_id: node-a", "node_id: ''"}, []string{"node_id: required"}},
		{"node not a member", [2]string{"node_id: node-a", "node_id: node-z"}, []string{`no member has id "node-z"`}},
		{"bad raft addr", [2]string{`raft_addr: "127.0.0.1:7102"`, `raft_addr: "nowhere"`}, []string{"cluster.members[1].raft_addr"}},
		{"duplicate id", [2]string{"id: node-b", "id: node-a"}, []string{"cluster.members[1].id: duplicate"}},
		{"no tls", [2]string{"tls: {ca: ca.crt, cert: node-a.crt, key: node-a.key}", ""}, []string{"tls.ca: required", "tls.cert: required", "tls.key: required"}},
		{"bad duration", [2]string{"mode: witness", "mode: witness\n  override_after: soon"}, []string{`"soon" is not a duration`}},
		{"override too short", [2]string{"mode: witness", "mode: witness\n  override_after: 100ms"}, []string{"cluster.override_after"}},
		{"two witnesses", [2]string{`api_addr: "127.0.0.1:7202"}`, `api_addr: "127.0.0.1:7202", witness: true}`}, []string{"exactly one member with witness"}},
		{"pair with witness", [2]string{"mode: witness", "mode: pair"}, []string{"pair mode has no witness"}},
		{"batch window", [2]string{"data_dir:", "store_forward: {batch_max_in_flight: 65}\ndata_dir:"}, []string{"store_forward.batch_max_in_flight", "outside 1..64"}},
		{"gc percent", [2]string{"data_dir:", "runtime: {gc_percent: 10}\ndata_dir:"}, []string{"runtime.gc_percent", "outside 50..10000"}},
		{"memory limit", [2]string{"data_dir:", "runtime: {memory_limit_mib: 8}\ndata_dir:"}, []string{"runtime.memory_limit_mib", "below 32"}},
		{"per-address over total", [2]string{"data_dir:", "http: {max_connections: 10, max_connections_per_address: 11}\ndata_dir:"}, []string{"http.max_connections_per_address", "from 1 to max_connections (10)"}},
		{"raft connections", [2]string{"mode: witness", "mode: witness\n  raft_connections: {max_connections: -1}"}, []string{"cluster.raft_connections.max_connections: must be at least 1"}},
		{"body budget under one message", [2]string{"data_dir:", "http: {max_body_bytes_in_flight: 1000}\ndata_dir:"}, []string{"http.max_body_bytes_in_flight", "1048576"}},
		{"log store", [2]string{"data_dir:", "raft: {log_store: lmdb}\ndata_dir:"}, []string{"raft.log_store", `"lmdb" is not auto, boltdb or wal`}},
		{"log file size", [2]string{"data_dir:", "log: {file: {max_size_mib: -5}}\ndata_dir:"}, []string{"log.file.max_size_mib", "outside 1..1048576"}},
		{"log file backups", [2]string{"data_dir:", "log: {file: {max_backups: -1, max_age_days: -2}}\ndata_dir:"}, []string{"log.file.max_backups: must not be negative", "log.file.max_age_days: must not be negative"}},
		{"opcua cert without key", [2]string{"data_dir:", "opcua: {cert: ua.der}\ndata_dir:"}, []string{"opcua: cert and key go together", "opcua/pki/own"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(valid, tt.replace[0], tt.replace[1], 1)
			if src == valid {
				t.Fatalf("replacement %q did not apply", tt.replace[0])
			}
			_, err := Parse([]byte(src))
			if err == nil {
				t.Fatal("Parse accepted an invalid config")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestWALRefusedOnWindows(t *testing.T) {
	if p := logStoreOn("windows", "wal"); !strings.Contains(p, "hashicorp/raft-wal#42") {
		t.Errorf("wal on windows: %q", p)
	}
	for _, ok := range [][2]string{{"windows", "auto"}, {"windows", "boltdb"}, {"linux", "wal"}} {
		if p := logStoreOn(ok[0], ok[1]); p != "" {
			t.Errorf("%s on %s refused: %s", ok[1], ok[0], p)
		}
	}
}

func TestLogFileDefaultsAndPath(t *testing.T) {
	c, err := Parse([]byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if c.Log.File != (LogFile{MaxSizeMiB: 100, MaxBackups: 10, MaxAgeDays: 30}) {
		t.Errorf("log.file defaults %+v", c.Log.File)
	}
	if p := c.LogFilePath(false); p != "" {
		t.Errorf("with stderr and no log.file.path: %q, want no file", p)
	}
	if p := c.LogFilePath(true); p != "/var/lib/scadad/log/scadad.log" {
		t.Errorf("without stderr: %q, want the data dir's log/scadad.log", p)
	}
	c.Log.File.Path = "/var/log/scadad/node.log"
	if p := c.LogFilePath(false); p != c.Log.File.Path {
		t.Errorf("log.file.path set: %q", p)
	}
}

func TestShippedConfigsLoad(t *testing.T) {
	for _, f := range []string{"node-a.yaml", "node-b.yaml", "witness.yaml", "dev.yaml", "pair-a.yaml", "pair-b.yaml"} {
		t.Run(f, func(t *testing.T) {
			if _, err := Load("../configs/" + f); err != nil {
				t.Fatalf("shipped config does not load: %v", err)
			}
		})
	}
}

// TestNodeNotAMemberIsOneError: a node_id no member entry names is the one
// mistake; the listeners it would have taken from that entry are not
// reported missing as well.
func TestNodeNotAMemberIsOneError(t *testing.T) {
	_, err := Parse([]byte(strings.Replace(valid, "node_id: node-a", "node_id: node-z", 1)))
	if err == nil || !strings.Contains(err.Error(), `no member has id "node-z"`) {
		t.Fatalf("err = %v, want it to name the missing member", err)
	}
	if strings.Contains(err.Error(), "api.listen") {
		t.Fatalf("err = %v; also reports api.listen, which only follows from the missing member", err)
	}
}

// A bad value does not hide the other problems in the file, and no message
// names a Go type: an operator knows the YAML keys, not nodeconfig.Cluster.
func TestEveryProblemReportedInYAMLTerms(t *testing.T) {
	_, err := Parse([]byte(`node_id: a
data_dir: x
cluster:
  mode: quorum
  heartbeat_timeout: 5 seconds
  snapshot_threshold: many
  colour: blue
  members: [{id: a, raft_addr: '127.0.0.1:1', api_addr: '127.0.0.1:2', shape: round}]
tls: {ca: ca, cert: c, key: k}
bogus: 1
`))
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{`"5 seconds" is not a duration`, "cluster.mode", "snapshot_threshold", "many", "colour", "cluster.members", "shape", "bogus"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not mention %q:\n%s", want, msg)
		}
	}
	for _, goName := range []string{"nodeconfig.", "uint64", "!!str", "into int"} {
		if strings.Contains(msg, goName) {
			t.Errorf("error shows the Go name %q:\n%s", goName, msg)
		}
	}
}
