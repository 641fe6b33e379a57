package nodeconfig

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Runtime defaults: see Runtime and bench/results/2026-12-01-5dd764a.md.
const (
	DefaultGCPercent      = 400
	DefaultMemoryLimitMiB = 80
)

// Modes of a cluster, see DESIGN.md §3.
// DefaultLogStore is raft.log_store when unset (docs/performance.md says
// why).
const DefaultLogStore = "auto"

const (
	ModeWitness = "witness"
	ModePair    = "pair"
	ModeStrict  = "strict"
)

// Config is one node's configuration file.
type Config struct {
	NodeID  string  `yaml:"node_id"`
	DataDir string  `yaml:"data_dir"`
	Cluster Cluster `yaml:"cluster"`
	Raft    Raft    `yaml:"raft"`
	TLS     TLS     `yaml:"tls"`
	API     API     `yaml:"api"`
	HTTP    HTTP    `yaml:"http"`
	Log     Log     `yaml:"log"`
	SF      SF      `yaml:"store_forward"`
	Runtime Runtime `yaml:"runtime"`
	OPCUA   OPCUA   `yaml:"opcua"`
	State   State   `yaml:"state"`
}

// Raft tunes the node's raft storage.
type Raft struct {
	// LogStore is where the raft log lives: boltdb (raft-boltdb/v2,
	// data_dir/raft/raft.db), wal (hashicorp/raft-wal,
	// data_dir/raft/raft-wal/) or auto (the default: wal for a new node,
	// the store already in data_dir otherwise, so an upgrade changes
	// nothing on disk). A node switched from boltdb to wal moves its log
	// over at the next start; back from wal to boltdb is refused.
	LogStore string `yaml:"log_store"`
	// LeaderWrite is when the leader writes its own copy of new entries:
	// parallel (the default: while they replicate; an entry is still
	// committed only once two disks hold it) or sequential (before they
	// replicate, hashicorp/raft's own order).
	LeaderWrite string `yaml:"leader_write"`
}

// OPCUA holds this node's OPC UA application certificate. Without one, the
// node makes a self-signed certificate on first start and keeps it in
// <data_dir>/opcua/pki/own (clients that trusted it go on trusting it
// across restarts). Trusted and rejected client certificates live in
// <data_dir>/opcua/pki/trusted and rejected; see PKIDir.
type OPCUA struct {
	// Cert and Key are PEM or DER files: an RSA certificate whose URI SAN
	// is urn:scadad:node:<node_id>, and its key.
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// Connections bound the OPC UA port (defaults: 256 in total, 64 per
	// client address).
	Connections ConnLimits `yaml:",inline"`
}

// PKIDir is the folder of this node's OPC UA certificates: own/ and
// private/ (its own, when not configured), trusted/ and rejected/ (client
// certificates).
func (c *Config) PKIDir() string { return filepath.Join(c.DataDir, "opcua", "pki") }

// Cluster is the Raft side of the node.
type Cluster struct {
	Mode string `yaml:"mode"`
	// RaftBind is the address the Raft transport listens on; defaults to
	// this node's raft_addr in Members.
	RaftBind string   `yaml:"raft_bind"`
	Members  []Member `yaml:"members"`
	// OverrideAfter is how long a lone survivor in pair mode waits without
	// any contact with its peer before it re-forms the cluster alone.
	OverrideAfter    Duration `yaml:"override_after"`
	HeartbeatTimeout Duration `yaml:"heartbeat_timeout"`
	ElectionTimeout  Duration `yaml:"election_timeout"`
	LeaderLease      Duration `yaml:"leader_lease_timeout"`
	// SnapshotThreshold is the number of log entries between snapshots.
	SnapshotThreshold uint64   `yaml:"snapshot_threshold"`
	SnapshotInterval  Duration `yaml:"snapshot_interval"`
	// HealPreferred names the node that wins the heal after a dual-active
	// split in pair mode, when both nodes name the same one.
	HealPreferred string `yaml:"heal_preferred"`
	// RaftConnections bound the raft listener (defaults: 128 in total, 32
	// per client address; a peer holds a handful).
	RaftConnections ConnLimits `yaml:"raft_connections"`
}

// Member is one configured member of the cluster; the list is identical on
// every node.
type Member struct {
	ID       string `yaml:"id"`
	RaftAddr string `yaml:"raft_addr"`
	APIAddr  string `yaml:"api_addr"`
	Witness  bool   `yaml:"witness"`
	// OPCUA is the member's OPC UA endpoint, opc.tcp://host:port; a member
	// without one serves no OPC UA (the witness never does).
	OPCUA string `yaml:"opcua"`
}

// TLS names the PEM files of the site CA and this node's certificate.
type TLS struct {
	CA   string `yaml:"ca"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// API is the gRPC control API listener (mutual TLS).
type API struct {
	Listen string `yaml:"listen"`
	// Connections bound the listener (defaults: 256 in total, 64 per
	// client address).
	Connections ConnLimits `yaml:",inline"`
}

// HTTP serves health, metrics and the local enqueue endpoint, over TLS
// with the node's certificate (the tls section's) unless Insecure.
type HTTP struct {
	Listen string `yaml:"listen"`
	// Insecure serves plain HTTP and lets anyone who reaches the listener
	// enqueue: for labs only; every start logs a warning and the metric
	// scadad_http_insecure is 1.
	Insecure bool `yaml:"insecure"`
	// MetricsOpen serves /metrics without a client certificate.
	MetricsOpen bool `yaml:"metrics_open"`
	// Pprof serves Go's /debug/pprof/ profiles on the same listener.
	Pprof bool `yaml:"pprof"`
	// Connections bound the listener (defaults: 1,024 in total, 256 per
	// client address: a site's producers, load balancers and scrapers).
	Connections ConnLimits `yaml:",inline"`
	// MaxBodyBytesInFlight bounds the request-body bytes being received at
	// once over all connections (default 64 MiB); a request that finds no
	// room is answered 503 with Retry-After.
	MaxBodyBytesInFlight int64 `yaml:"max_body_bytes_in_flight"`
	// ConsoleReadOnly makes the status page (GET /) read-only for
	// everyone; otherwise operators may retry and discard parked messages
	// from it (on a TLS listener: a client certificate with role operator
	// or admin; on an insecure one: a client on this machine).
	ConsoleReadOnly bool `yaml:"console_read_only"`
	// ConsoleLoopbackOperators lets a browser on this machine without a
	// client certificate use the status page of a TLS listener as an
	// operator (scadad --dev sets it; anyone who can log in to the
	// machine can then act, so a plant leaves it off).
	ConsoleLoopbackOperators bool `yaml:"console_loopback_operators"`
}

// ConnLimits bound one listener's connections: its share of the process's
// file descriptors, so that exhausting it never starves raft or the state
// files. Connections over a bound are closed as they are accepted. When
// the process's descriptor limit is lower than all listeners' totals plus
// what the rest of scadad needs, the totals are scaled down at start (and
// a warning says so).
type ConnLimits struct {
	MaxConnections           int `yaml:"max_connections"`
	MaxConnectionsPerAddress int `yaml:"max_connections_per_address"`
}

// Log configures zerolog.
type Log struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"` // json | console, of stderr
	// File is a size-rotated JSON log file besides stderr. Under the
	// Windows service manager, where stderr goes nowhere, it is always
	// written (default path data_dir/log/scadad.log).
	File LogFile `yaml:"file"`
}

// LogFile is the rotated JSON log file: when it reaches MaxSizeMiB it is
// renamed with its time and a new one begun; the oldest renamed files go
// past MaxBackups or MaxAgeDays (0: no bound on that one).
type LogFile struct {
	Path       string `yaml:"path"`
	MaxSizeMiB int    `yaml:"max_size_mib"`
	MaxBackups int    `yaml:"max_backups"`
	MaxAgeDays int    `yaml:"max_age_days"`
}

// DefaultLogFile is log.file.path under the Windows service manager when
// none is set, relative to data_dir.
const DefaultLogFile = "log/scadad.log"

// State tunes the checks of the state file (fsm.db) while the node runs.
type State struct {
	// ScrubInterval is how often the whole state file is checked: bbolt's
	// consistency check, every key and value walked, every byte read.
	// Default 1h.
	ScrubInterval Duration `yaml:"scrub_interval"`
	// ScrubBytesPerSecond bounds the scrub's read of the file, so it never
	// takes the disk or a core from the workload. Default 32 MiB/s.
	ScrubBytesPerSecond int64 `yaml:"scrub_bytes_per_second"`
	// ScrubCPUShare bounds the CPU of the scrub's walk of every key and
	// value and of a checkpoint's digest to this share of one core
	// (0 < share <= 1). Default 0.25.
	ScrubCPUShare float64 `yaml:"scrub_cpu_share"`
	// CheckpointInterval is how often the Active proposes a cross-node
	// checkpoint (every node digests its state at one log index and the
	// majority's digest decides which node diverged); it also proposes one
	// when it becomes Active and a node proposes one after it installs a
	// snapshot. Default 1h.
	CheckpointInterval Duration `yaml:"checkpoint_interval"`
}

// SF tunes the store-and-forward enqueue path.
type SF struct {
	// MaxPayloadBytes bounds one message; larger enqueues get 413.
	MaxPayloadBytes int `yaml:"max_payload_bytes"`
	// BatchDelay is how long a batch waits to fill while another is being
	// committed (with none in flight it goes at once).
	BatchDelay Duration `yaml:"batch_delay"`
	// BatchMaxMessages bounds one Raft entry.
	BatchMaxMessages int `yaml:"batch_max_messages"`
	// BatchMaxInFlight is how many batches may be being committed at once.
	BatchMaxInFlight int `yaml:"batch_max_in_flight"`
}

// Runtime tunes the Go runtime of the daemon. The GOGC and GOMEMLIMIT
// environment variables, when set, win over these fields.
type Runtime struct {
	// GCPercent is the heap growth that triggers a garbage collection, as
	// GOGC. The enqueue path allocates per message and keeps little, so a
	// collection every 100 % of a small live heap costs more CPU than the
	// memory it saves; see bench/results/2026-12-01-5dd764a.md.
	GCPercent int `yaml:"gc_percent"`
	// MemoryLimitMiB is the Go runtime's soft memory limit, as GOMEMLIMIT:
	// near it the collector runs regardless of GCPercent, which keeps the
	// larger GCPercent from growing the heap without bound.
	// It counts the Go heap and runtime, not the mapped bbolt files.
	// -1 means no limit.
	MemoryLimitMiB int `yaml:"memory_limit_mib"`
}

// Duration is a time.Duration written as "500ms" or "10s" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		// A TypeError lets the decoder go on, so the file's other problems
		// are reported with this one.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal !!duration `%s` into duration", n.Line, s)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Load reads, defaults and validates the config at path. Relative paths in
// the file are resolved against the file's folder.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read node config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("node config %s: %w", path, err)
	}
	c.resolvePaths(filepath.Dir(path))
	return c, nil
}

// Parse decodes data strictly (unknown fields are errors), applies defaults
// and validates.
func Parse(data []byte) (*Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var problems []error
	if err := dec.Decode(&c); err != nil {
		var terr *yaml.TypeError
		if !errors.As(err, &terr) {
			return nil, fmt.Errorf("decode: %w", err)
		}
		// Values of the wrong type: report them and whatever else is
		// wrong with what did decode.
		problems = yamlProblems(data, terr)
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return &c, nil
}

// ApplyDefaults fills every unset field with its documented default.
func (c *Config) ApplyDefaults() {
	def := func(d *Duration, v time.Duration) {
		if *d == 0 {
			*d = Duration(v)
		}
	}
	if c.Cluster.Mode == "" {
		c.Cluster.Mode = ModeWitness
	}
	def(&c.Cluster.OverrideAfter, 10*time.Second)
	if c.Raft.LogStore == "" {
		c.Raft.LogStore = DefaultLogStore
	}
	if c.Raft.LeaderWrite == "" {
		c.Raft.LeaderWrite = "parallel"
	}
	def(&c.Cluster.HeartbeatTimeout, 500*time.Millisecond)
	def(&c.Cluster.ElectionTimeout, 500*time.Millisecond)
	// A tenth below the heartbeat timeout, as raftnode.DefaultLeaderLease
	// (nodeconfig imports no raft package).
	def(&c.Cluster.LeaderLease, max(c.Cluster.HeartbeatTimeout.D()-c.Cluster.HeartbeatTimeout.D()/10, 5*time.Millisecond))
	def(&c.Cluster.SnapshotInterval, 30*time.Second)
	if c.Cluster.SnapshotThreshold == 0 {
		c.Cluster.SnapshotThreshold = 8192
	}
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	if c.Log.Format == "" {
		c.Log.Format = "json"
	}
	if c.Log.File.MaxSizeMiB == 0 {
		c.Log.File.MaxSizeMiB = 100
	}
	if c.Log.File.MaxBackups == 0 {
		c.Log.File.MaxBackups = 10
	}
	if c.Log.File.MaxAgeDays == 0 {
		c.Log.File.MaxAgeDays = 30
	}
	if c.SF.MaxPayloadBytes == 0 {
		c.SF.MaxPayloadBytes = 1 << 20
	}
	def(&c.SF.BatchDelay, 2*time.Millisecond)
	def(&c.State.ScrubInterval, time.Hour)
	if c.State.ScrubBytesPerSecond == 0 {
		c.State.ScrubBytesPerSecond = 32 << 20
	}
	if c.State.ScrubCPUShare == 0 {
		c.State.ScrubCPUShare = 0.25
	}
	def(&c.State.CheckpointInterval, time.Hour)
	if c.SF.BatchMaxMessages == 0 {
		c.SF.BatchMaxMessages = 512
	}
	if c.SF.BatchMaxInFlight == 0 {
		c.SF.BatchMaxInFlight = 4
	}
	if c.Runtime.GCPercent == 0 {
		c.Runtime.GCPercent = DefaultGCPercent
	}
	if c.Runtime.MemoryLimitMiB == 0 {
		c.Runtime.MemoryLimitMiB = DefaultMemoryLimitMiB
	}
	defConns := func(l *ConnLimits, total, perAddr int) {
		if l.MaxConnections == 0 {
			l.MaxConnections = total
		}
		if l.MaxConnectionsPerAddress == 0 {
			l.MaxConnectionsPerAddress = min(perAddr, l.MaxConnections)
		}
	}
	defConns(&c.HTTP.Connections, 1024, 256)
	defConns(&c.API.Connections, 256, 64)
	defConns(&c.Cluster.RaftConnections, 128, 32)
	defConns(&c.OPCUA.Connections, 256, 64)
	if c.HTTP.MaxBodyBytesInFlight == 0 {
		c.HTTP.MaxBodyBytesInFlight = 64 << 20
	}
	if c.Cluster.RaftBind == "" {
		if m, ok := c.Self(); ok {
			c.Cluster.RaftBind = m.RaftAddr
		}
	}
	if c.API.Listen == "" {
		if m, ok := c.Self(); ok {
			c.API.Listen = m.APIAddr
		}
	}
}

// Self returns this node's entry in the membership.
func (c *Config) Self() (Member, bool) {
	for _, m := range c.Cluster.Members {
		if m.ID == c.NodeID {
			return m, true
		}
	}
	return Member{}, false
}

// Peer returns the one other voter in pair mode (or the other non-witness
// voter in witness mode).
func (c *Config) Peer() (Member, bool) {
	for _, m := range c.Cluster.Members {
		if m.ID != c.NodeID && !m.Witness {
			return m, true
		}
	}
	return Member{}, false
}

// IsWitness reports whether this node is the configured witness.
func (c *Config) IsWitness() bool {
	m, ok := c.Self()
	return ok && m.Witness
}

// Validate checks every field and reports all problems at once, each naming
// its field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.State.ScrubInterval < 0 || c.State.ScrubBytesPerSecond < 0 {
		bad("state", "scrub_interval and scrub_bytes_per_second must be positive (got %s, %d)", c.State.ScrubInterval.D(), c.State.ScrubBytesPerSecond)
	}
	if c.State.ScrubCPUShare < 0 || c.State.ScrubCPUShare > 1 {
		bad("state.scrub_cpu_share", "must be above 0 and at most 1 (a share of one core), got %g", c.State.ScrubCPUShare)
	}
	if c.State.CheckpointInterval < 0 {
		bad("state.checkpoint_interval", "must be positive, got %s", c.State.CheckpointInterval.D())
	}
	if c.NodeID == "" {
		bad("node_id", "required")
	} else if strings.ContainsAny(c.NodeID, " /\\:") {
		bad("node_id", "%q must not contain spaces, slashes or colons", c.NodeID)
	}
	if c.DataDir == "" {
		bad("data_dir", "required")
	}
	if c.Raft.LogStore != "auto" && c.Raft.LogStore != "boltdb" && c.Raft.LogStore != "wal" {
		bad("raft.log_store", "%q is not auto, boltdb or wal", c.Raft.LogStore)
	}
	if c.Raft.LeaderWrite != "parallel" && c.Raft.LeaderWrite != "sequential" {
		bad("raft.leader_write", "%q is not parallel or sequential", c.Raft.LeaderWrite)
	}
	if problem := logStoreOn(runtime.GOOS, c.Raft.LogStore); problem != "" {
		bad("raft.log_store", "%s", problem)
	}
	switch c.Cluster.Mode {
	case ModeWitness, ModePair, ModeStrict:
	default:
		bad("cluster.mode", "%q is not one of witness, pair, strict", c.Cluster.Mode)
	}
	if len(c.Cluster.Members) == 0 {
		bad("cluster.members", "at least one member required")
	}
	seen := map[string]bool{}
	witnesses, voters := 0, 0
	for i, m := range c.Cluster.Members {
		f := fmt.Sprintf("cluster.members[%d]", i)
		if m.ID == "" {
			bad(f+".id", "required")
		} else if seen[m.ID] {
			bad(f+".id", "duplicate member %q", m.ID)
		}
		seen[m.ID] = true
		if err := checkHostPort(m.RaftAddr); err != nil {
			bad(f+".raft_addr", "%v", err)
		}
		if err := checkHostPort(m.APIAddr); err != nil {
			bad(f+".api_addr", "%v", err)
		}
		if m.OPCUA != "" {
			if m.Witness {
				bad(f+".opcua", "the witness serves no OPC UA")
			} else if _, _, err := OPCUAHostPort(m.OPCUA); err != nil {
				bad(f+".opcua", "%v", err)
			}
		}
		if m.Witness {
			witnesses++
		} else {
			voters++
		}
	}
	if c.NodeID != "" && len(c.Cluster.Members) > 0 && !seen[c.NodeID] {
		bad("cluster.members", "no member has id %q (node_id)", c.NodeID)
	}
	switch c.Cluster.Mode {
	case ModeWitness:
		if len(c.Cluster.Members) > 1 && witnesses != 1 {
			bad("cluster.members", "witness mode needs exactly one member with witness: true, found %d", witnesses)
		}
	case ModePair:
		if witnesses != 0 {
			bad("cluster.members", "pair mode has no witness; use mode: witness")
		}
		if voters > 2 {
			bad("cluster.members", "pair mode has at most two members, found %d", voters)
		}
	}
	if c.Cluster.HealPreferred != "" && !seen[c.Cluster.HealPreferred] {
		bad("cluster.heal_preferred", "%q is not a member", c.Cluster.HealPreferred)
	}
	if c.Cluster.RaftBind != "" {
		if err := checkHostPort(c.Cluster.RaftBind); err != nil {
			bad("cluster.raft_bind", "%v", err)
		}
	}
	if c.Cluster.OverrideAfter.D() < time.Second {
		bad("cluster.override_after", "%s is shorter than 1s; a blip would split the pair", c.Cluster.OverrideAfter.D())
	}
	if c.Cluster.OverrideAfter.D() <= c.Cluster.ElectionTimeout.D() {
		bad("cluster.override_after", "must exceed election_timeout (%s)", c.Cluster.ElectionTimeout.D())
	}
	for _, d := range []struct {
		field string
		v     Duration
	}{{"cluster.heartbeat_timeout", c.Cluster.HeartbeatTimeout}, {"cluster.election_timeout", c.Cluster.ElectionTimeout}, {"cluster.leader_lease_timeout", c.Cluster.LeaderLease}} {
		if d.v.D() < 10*time.Millisecond {
			bad(d.field, "%s is too short (minimum 10ms)", d.v.D())
		}
	}
	if c.Cluster.LeaderLease.D() > c.Cluster.HeartbeatTimeout.D() {
		bad("cluster.leader_lease_timeout", "must not exceed heartbeat_timeout (%s)", c.Cluster.HeartbeatTimeout.D())
	}
	if c.TLS.CA == "" {
		bad("tls.ca", "required (the cluster never runs without mutual TLS)")
	}
	if c.TLS.Cert == "" {
		bad("tls.cert", "required")
	}
	if c.TLS.Key == "" {
		bad("tls.key", "required")
	}
	switch {
	case c.API.Listen == "" && c.NodeID != "" && !seen[c.NodeID]:
		// Without a member entry of its own the missing listener follows
		// from the error above; saying it again only misleads.
	case c.API.Listen == "":
		bad("api.listen", "required (or set api_addr on this node's member entry)")
	default:
		if err := checkHostPort(c.API.Listen); err != nil {
			bad("api.listen", "%v", err)
		}
	}
	if c.HTTP.Listen != "" {
		if err := checkHostPort(c.HTTP.Listen); err != nil {
			bad("http.listen", "%v", err)
		}
	}
	conns := func(field string, l ConnLimits) {
		if l.MaxConnections < 1 {
			bad(field+".max_connections", "must be at least 1")
		}
		if l.MaxConnectionsPerAddress < 1 || l.MaxConnectionsPerAddress > l.MaxConnections {
			bad(field+".max_connections_per_address", "must be from 1 to max_connections (%d)", l.MaxConnections)
		}
	}
	conns("http", c.HTTP.Connections)
	conns("api", c.API.Connections)
	conns("cluster.raft_connections", c.Cluster.RaftConnections)
	conns("opcua", c.OPCUA.Connections)
	if c.HTTP.MaxBodyBytesInFlight < int64(c.SF.MaxPayloadBytes) {
		bad("http.max_body_bytes_in_flight", "must hold at least one message of store_forward.max_payload_bytes (%d)", c.SF.MaxPayloadBytes)
	}
	switch c.Log.Level {
	case "trace", "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q is not one of trace, debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		bad("log.format", "%q is not one of json, console", c.Log.Format)
	}
	if c.Log.File.MaxSizeMiB < 1 || c.Log.File.MaxSizeMiB > 1<<20 {
		bad("log.file.max_size_mib", "%d is outside 1..1048576", c.Log.File.MaxSizeMiB)
	}
	if c.Log.File.MaxBackups < 0 {
		bad("log.file.max_backups", "must not be negative (0 keeps the default, 10)")
	}
	if c.Log.File.MaxAgeDays < 0 {
		bad("log.file.max_age_days", "must not be negative (0 keeps the default, 30)")
	}
	if (c.OPCUA.Cert == "") != (c.OPCUA.Key == "") {
		bad("opcua", "cert and key go together (neither: a self-signed certificate is made in %s)", filepath.Join(c.PKIDir(), "own"))
	}
	if c.SF.MaxPayloadBytes < 0 {
		bad("store_forward.max_payload_bytes", "must be positive")
	}
	if c.SF.BatchMaxMessages < 1 {
		bad("store_forward.batch_max_messages", "must be at least 1")
	}
	if c.SF.BatchMaxInFlight < 1 || c.SF.BatchMaxInFlight > 64 {
		bad("store_forward.batch_max_in_flight", "%d is outside 1..64", c.SF.BatchMaxInFlight)
	}
	if c.Runtime.GCPercent < 50 || c.Runtime.GCPercent > 10000 {
		bad("runtime.gc_percent", "%d is outside 50..10000", c.Runtime.GCPercent)
	}
	if m := c.Runtime.MemoryLimitMiB; m != -1 && m < 32 {
		bad("runtime.memory_limit_mib", "%d is below 32 (a limit that low keeps the collector running; -1 means no limit)", m)
	}
	return errors.Join(errs...)
}

func checkHostPort(s string) error {
	if s == "" {
		return errors.New("required")
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", s, err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", s)
	}
	if port == "" || port == "0" {
		return fmt.Errorf("%q needs a fixed port", s)
	}
	return nil
}

func (c *Config) resolvePaths(base string) {
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(base, *p)
		}
	}
	abs(&c.DataDir)
	abs(&c.TLS.CA)
	abs(&c.TLS.Cert)
	abs(&c.TLS.Key)
	abs(&c.OPCUA.Cert)
	abs(&c.OPCUA.Key)
	abs(&c.Log.File.Path)
}

// logStoreOn says what is wrong with the raft log store on the system
// goos, or "". raft-wal syncs its folder when it creates its meta
// database, which Windows refuses (hashicorp/raft-wal#42).
func logStoreOn(goos, store string) string {
	if goos == "windows" && store == "wal" {
		return "wal does not work on Windows: raft-wal syncs its folder, which Windows refuses (\"Access is denied\", hashicorp/raft-wal#42); use auto (boltdb there) or boltdb"
	}
	return ""
}

// LogFilePath is the rotated log file to write, or "" for none:
// log.file.path, or data_dir/log/scadad.log under a service manager that
// gives the process no stderr.
func (c *Config) LogFilePath(noStderr bool) string {
	switch {
	case c.Log.File.Path != "":
		return c.Log.File.Path
	case noStderr:
		return filepath.Join(c.DataDir, filepath.FromSlash(DefaultLogFile))
	}
	return ""
}

// OPCUAHostPort splits an opc.tcp://host:port endpoint.
func OPCUAHostPort(endpoint string) (string, int, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "opc.tcp" || u.Host == "" {
		return "", 0, fmt.Errorf("%q is not an opc.tcp://host:port endpoint", endpoint)
	}
	host, portStr, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", 0, fmt.Errorf("%q: %v", endpoint, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q: port %q is not a port number", endpoint, portStr)
	}
	return host, port, nil
}
