package siteconfig

import "time"

// CurrentVersion is the only schema version this build reads and writes.
const CurrentVersion = 1

// Site is one site configuration: everything both nodes of a pair must agree
// on. A *Site handed out by Parse or a Holder is shared; treat it as
// read-only (use Clone to get a copy to change).
type Site struct {
	// Version is the schema version; must be CurrentVersion.
	Version int `yaml:"version"`
	// Name identifies the site in logs, metrics and the audit trail.
	Name string `yaml:"name"`
	// HotStandby runs the subscribe workers on the Standby too (read-only)
	// and makes the OPC UA server advertise Hot instead of Warm redundancy.
	HotStandby bool `yaml:"hot_standby"`
	// Connections are the data connections instances read tags through.
	Connections []Connection `yaml:"connections"`
	// Instances are the plant objects whose attributes become OPC UA
	// variables and subscribe-worker tags.
	Instances []Instance `yaml:"instances"`
	// Targets are the store-and-forward delivery endpoints.
	Targets []Target `yaml:"targets,omitempty"`
	// History routes tag values to store-and-forward targets.
	History []HistoryRule `yaml:"history,omitempty"`
	// Alarms are the native alarm sources, the limit alarms and the alarm
	// history target.
	Alarms Alarms `yaml:"alarms,omitempty"`
	// OPCUA configures the OPC UA server both nodes run.
	OPCUA OPCUAServer `yaml:"opcua"`
}

// ConnectionKind says which protocol a connection speaks.
type ConnectionKind string

// The connection kinds.
const (
	// KindMxAccess is an MxAccess gateway reached over gRPC.
	KindMxAccess ConnectionKind = "mxaccess"
	// KindOPCUA is an OPC UA server this site reads as a client.
	KindOPCUA ConnectionKind = "opcua"
)

// Connection is one data connection. Exactly the options block matching
// Kind is set.
type Connection struct {
	Name     string              `yaml:"name"`
	Kind     ConnectionKind      `yaml:"kind"`
	MxAccess *MxAccessConnection `yaml:"mxaccess,omitempty"`
	OPCUA    *OPCUAConnection    `yaml:"opcua,omitempty"`
}

// MxAccessConnection holds the options of an MxAccess gateway connection.
// The subscribe options are the seeds' Lever 1–3 knobs.
type MxAccessConnection struct {
	// Endpoint is the gateway's gRPC address, host:port.
	Endpoint string `yaml:"endpoint"`
	// WriteUserID is the MxAccess user writes are made as; 0 means
	// supervisory mode (AdviseSupervisory instead of a plain Advise).
	WriteUserID int `yaml:"write_user_id"`
	// CommandTimeout is sent as the session command timeout at OpenSession;
	// it bounds every command on the session, writes included.
	CommandTimeout time.Duration `yaml:"command_timeout"`
	// InFlightCeiling is how long an unanswered subscribe blocks the next
	// one before its reply is presumed lost.
	InFlightCeiling time.Duration `yaml:"in_flight_ceiling"`
	// BackoffFloor and BackoffMax bound the subscribe retry backoff
	// (×2 with jitter from floor to max, reset on success).
	BackoffFloor time.Duration `yaml:"backoff_floor"`
	BackoffMax   time.Duration `yaml:"backoff_max"`
	// PreferBulkSupervisory uses one supervisory SubscribeBulk when the
	// gateway advertises bulk-subscribe-supervisory; false forces the
	// legacy AddItemBulk + per-item AdviseSupervisory path. Nil means the
	// default (true); Parse always fills it in.
	PreferBulkSupervisory *bool `yaml:"prefer_bulk_supervisory"`
}

// BulkSupervisory reports whether the connection may use the bulk
// supervisory subscribe; nil counts as the default, true.
func (m *MxAccessConnection) BulkSupervisory() bool {
	return m.PreferBulkSupervisory == nil || *m.PreferBulkSupervisory
}

// OPCUAConnection holds the options of a connection to an upstream OPC UA
// server read as a client.
type OPCUAConnection struct {
	// Endpoint is the server's opc.tcp:// URL.
	Endpoint string `yaml:"endpoint"`
	// SecurityPolicy is a short policy name (None, Basic256Sha256, ...).
	SecurityPolicy string `yaml:"security_policy"`
	// SecurityMode is None, Sign or SignAndEncrypt.
	SecurityMode string `yaml:"security_mode"`
	// Identity is how the client authenticates its session.
	Identity ClientIdentity `yaml:"identity"`
	// CertificateFile and PrivateKeyFile are the client's application
	// certificate, paths on each node; required unless SecurityMode is None.
	CertificateFile string `yaml:"certificate_file,omitempty"`
	PrivateKeyFile  string `yaml:"private_key_file,omitempty"`
	// ServerCertificateFile is the upstream server's certificate, or the
	// CA that issued it, a path on each node: a server presenting another
	// is refused. Empty accepts any (the client library checks none).
	ServerCertificateFile string `yaml:"server_certificate_file,omitempty"`
	// RequestTimeout bounds each service call.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// PublishingInterval is the subscription publishing interval.
	PublishingInterval time.Duration `yaml:"publishing_interval"`
	// BackoffFloor and BackoffMax bound the reconnect/resubscribe backoff.
	BackoffFloor time.Duration `yaml:"backoff_floor"`
	BackoffMax   time.Duration `yaml:"backoff_max"`
}

// IdentityType says how an OPC UA session authenticates.
type IdentityType string

// The identity types.
const (
	IdentityAnonymous IdentityType = "anonymous"
	IdentityUsername  IdentityType = "username"
)

// ClientIdentity is the identity an OPC UA client session presents. The
// password lives in a file on each node so that no secret travels in the
// replicated artifact.
type ClientIdentity struct {
	Type         IdentityType `yaml:"type"`
	Username     string       `yaml:"username,omitempty"`
	PasswordFile string       `yaml:"password_file,omitempty"`
}

// DataType is the type of an attribute's value.
type DataType string

// The attribute data types.
const (
	TypeBool   DataType = "bool"
	TypeInt32  DataType = "int32"
	TypeInt64  DataType = "int64"
	TypeFloat  DataType = "float"
	TypeDouble DataType = "double"
	TypeString DataType = "string"
)

// Numeric reports whether values of t can have a deadband.
func (t DataType) Numeric() bool {
	switch t {
	case TypeInt32, TypeInt64, TypeFloat, TypeDouble:
		return true
	}
	return false
}

// Instance is one plant object: a named set of attributes read through a
// connection.
type Instance struct {
	Name string `yaml:"name"`
	// Connection is the default connection of the instance's attributes.
	Connection  string      `yaml:"connection"`
	Description string      `yaml:"description,omitempty"`
	Attributes  []Attribute `yaml:"attributes"`
}

// Attribute is one tag of an instance.
type Attribute struct {
	Name string   `yaml:"name"`
	Type DataType `yaml:"type"`
	// Tag is the address on the connection: a Galaxy reference for
	// MxAccess (Z28061.Temp.PV), a NodeId for OPC UA (ns=2;s=Temp).
	Tag string `yaml:"tag"`
	// Connection overrides the instance's connection for this attribute;
	// empty means the instance's.
	Connection  string `yaml:"connection,omitempty"`
	Writable    bool   `yaml:"writable"`
	Description string `yaml:"description,omitempty"`
	Units       string `yaml:"units,omitempty"`
	// EURange is the value's normal operating range (OPC UA Part 8
	// EURange): served as the variable's EURange property, which makes it
	// an AnalogItem, and what a client's percent deadband is a percentage
	// of. Numeric attributes only.
	EURange *Range `yaml:"eu_range,omitempty"`
	// AllowNonFinite lets a client write NaN or ±Inf to a Double or
	// Float attribute; without it such a write is refused (BadOutOfRange)
	// and never reaches the device.
	AllowNonFinite bool `yaml:"allow_non_finite,omitempty"`
}

// Range is a numeric range, low below high.
type Range struct {
	Low  float64 `yaml:"low"`
	High float64 `yaml:"high"`
}

// Target is a store-and-forward delivery endpoint.
type Target struct {
	Name string `yaml:"name"`
	// Kind is how messages are delivered: TargetHTTP (the default) or
	// TargetPostgres.
	Kind string `yaml:"kind,omitempty"`
	// URL is the http(s) endpoint messages are POSTed to (kind http).
	URL string `yaml:"url,omitempty"`
	// Postgres configures a kind postgres target.
	Postgres *PostgresTarget `yaml:"postgres,omitempty"`
	// MQTT configures a kind mqtt target.
	MQTT *MQTTTarget `yaml:"mqtt,omitempty"`
	// Headers are added to every delivery. Idempotency-Key is set by the
	// delivery itself and may not be configured.
	Headers map[string]string `yaml:"headers,omitempty"`
	// Timeout bounds one delivery attempt.
	Timeout time.Duration `yaml:"timeout"`
	// BackoffFloor and BackoffMax bound the retry backoff after a failure.
	BackoffFloor time.Duration `yaml:"backoff_floor"`
	BackoffMax   time.Duration `yaml:"backoff_max"`
	// MaxAttempts is how many failed deliveries park a message.
	MaxAttempts int `yaml:"max_attempts"`
	// MaxPayloadBytes rejects larger messages at enqueue.
	MaxPayloadBytes int `yaml:"max_payload_bytes"`
	// MaxInFlight is how many deliveries to this target may be under way
	// at once. 1 (the default) delivers strictly one after another, so the
	// target receives messages in enqueue order; more are still started in
	// enqueue order, but may arrive and be retried out of it.
	MaxInFlight int `yaml:"max_in_flight"`
	// CAFile is a PEM file, a path on each node, of the CA certificates an
	// https target's certificate must chain to instead of the system's
	// (a site's private CA); https only.
	CAFile string `yaml:"ca_file,omitempty"`
	// MaxPending caps the messages this target may hold waiting for
	// delivery: further enqueues are refused (HTTP 507) until deliveries
	// catch up, so a target down for days cannot fill the disk the rest of
	// the site shares. 0 (the default) sets no cap.
	MaxPending int `yaml:"max_pending,omitempty"`
	// ParkOn lists the answers that park a message at once instead of
	// being retried: HTTP status codes or classes ("400", "4xx"), or
	// "none". Empty: every 4xx except 408, 425 and 429 parks at once;
	// 5xx, timeouts and connection errors are retried.
	ParkOn []string `yaml:"park_on,omitempty"`
	// BatchMaxMessages > 1 delivers up to that many pending messages in
	// one request (a JSON array or NDJSON body, BatchFormat), acknowledged
	// as a whole; BatchMaxBytes bounds the payloads of one batch.
	BatchMaxMessages int    `yaml:"batch_max_messages,omitempty"`
	BatchMaxBytes    int    `yaml:"batch_max_bytes,omitempty"`
	BatchFormat      string `yaml:"batch_format,omitempty"`
}

// Target kinds.
const (
	TargetHTTP     = "http"
	TargetPostgres = "postgres"
	TargetMQTT     = "mqtt"
)

// MQTTTarget is the broker a kind mqtt target publishes to (MQTT 5, QoS 1).
type MQTTTarget struct {
	// Broker is mqtt://host:port or tls://host:port.
	Broker string `yaml:"broker"`
	// Topic is the topic template: {target}, {node} and {id} are replaced.
	Topic string `yaml:"topic"`
	// Username and PasswordFile (a path on each node) authenticate.
	Username     string `yaml:"username,omitempty"`
	PasswordFile string `yaml:"password_file,omitempty"`
	// CAFile, CertFile and KeyFile (paths on each node) configure TLS.
	CAFile   string `yaml:"ca_file,omitempty"`
	CertFile string `yaml:"cert_file,omitempty"`
	KeyFile  string `yaml:"key_file,omitempty"`
	// SessionExpiry keeps the broker's session across reconnects.
	SessionExpiry time.Duration `yaml:"session_expiry,omitempty"`
	// InFlight bounds the publishes of a batch awaiting PUBACK at once
	// (0: the batch; the broker's receive maximum bounds it too).
	InFlight int `yaml:"in_flight,omitempty"`
	// Protocol is the MQTT version: "5" (empty is the same) or "3.1.1".
	Protocol string `yaml:"protocol,omitempty"`
	// Sparkplug makes the target a Sparkplug B Edge Node for tag history
	// rules of format sparkplug; Topic is then unused.
	Sparkplug *SparkplugNode `yaml:"sparkplug,omitempty"`
}

// SparkplugNode names the Edge Node the Active node is.
type SparkplugNode struct {
	// GroupID and EdgeNode are the topic levels of spBv1.0/<group>/…/<edge node>.
	GroupID  string `yaml:"group_id"`
	EdgeNode string `yaml:"edge_node"`
	// PrimaryHost is the primary host application's id: publishing is held
	// while its STATE says offline.
	PrimaryHost string `yaml:"primary_host,omitempty"`
}

// PostgresTarget is where a kind postgres target inserts its rows.
type PostgresTarget struct {
	// DSN is a libpq connection string or URL, without the password.
	DSN string `yaml:"dsn"`
	// PasswordFile is a path on each node holding the password.
	PasswordFile string `yaml:"password_file,omitempty"`
	// Table is the target's table, [schema.]name.
	Table string `yaml:"table"`
}

// HistoryMode says when a forwarded tag value is taken.
type HistoryMode string

// The history modes.
const (
	// HistoryOnChange forwards every change that passes the deadband.
	HistoryOnChange HistoryMode = "on_change"
	// HistorySample forwards the latest value every SampleInterval.
	HistorySample HistoryMode = "sample"
)

// HistoryRule forwards values of the selected attributes to a target
// through the store-and-forward buffer.
type HistoryRule struct {
	Name   string `yaml:"name"`
	Target string `yaml:"target"`
	// Select lists the instances (and optionally attributes) forwarded.
	Select []HistorySelector `yaml:"select"`
	Mode   HistoryMode       `yaml:"mode"`
	// SampleInterval is required in sample mode and unused otherwise.
	SampleInterval time.Duration `yaml:"sample_interval,omitempty"`
	// Deadband is an absolute deadband applied to numeric attributes;
	// 0 forwards every change.
	Deadband float64 `yaml:"deadband,omitempty"`
	// MaxBatch is the most values sent in one message.
	MaxBatch int `yaml:"max_batch"`
	// MaxBatchDelay is the longest a value waits for its batch to fill.
	MaxBatchDelay time.Duration `yaml:"max_batch_delay"`
	// Format is how values are encoded: HistoryJSON (empty is the same) or
	// HistorySparkplug (for a target with mqtt.sparkplug).
	Format HistoryFormat `yaml:"format,omitempty"`
}

// HistoryFormat is the encoding of a history rule's messages.
type HistoryFormat string

// The history formats.
const (
	HistoryJSON      HistoryFormat = "json"
	HistorySparkplug HistoryFormat = "sparkplug"
)

// HistorySelector picks attributes of one instance; no attributes means
// all of them.
type HistorySelector struct {
	Instance   string   `yaml:"instance"`
	Attributes []string `yaml:"attributes,omitempty"`
}

// OPCUAServer configures the OPC UA server. Per-node values (advertised
// host name, application URI, certificate) are node config.
type OPCUAServer struct {
	// NamespaceURI is the namespace the site's variables live in.
	NamespaceURI string `yaml:"namespace_uri"`
	// Endpoint is the listen URL, opc.tcp://host:port[/path]; each node
	// advertises its own host name from its node config.
	Endpoint string `yaml:"endpoint"`
	// Security lists the accepted policy/mode pairs.
	Security []SecurityPair `yaml:"security"`
	// Identities says which user identities sessions may present.
	Identities ServerIdentities `yaml:"identities"`
	// MaxSessions caps concurrent client sessions.
	MaxSessions int `yaml:"max_sessions"`
}

// SecurityPair is one accepted security policy with its message mode.
type SecurityPair struct {
	Policy string `yaml:"policy"`
	Mode   string `yaml:"mode"`
}

// ServerIdentities are the user identities the OPC UA server accepts.
type ServerIdentities struct {
	Anonymous bool `yaml:"anonymous"`
	// AnonymousCanWrite lets anonymous sessions write (subject to the
	// Active-role gate); otherwise only users with CanWrite do.
	AnonymousCanWrite bool         `yaml:"anonymous_can_write,omitempty"`
	Users             []ServerUser `yaml:"users,omitempty"`
}

// ServerUser is one username identity. The password is read from a file on
// each node so that it does not travel in the replicated artifact.
// Deprecated for this release: the replicated users (scadactl opcua users
// set) keep a hash in the replicated state instead.
type ServerUser struct {
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
	// CanWrite allows the user's writes through the role gate; without it
	// the user reads only.
	CanWrite bool `yaml:"can_write"`
}

// Alarms configures the site's alarms (docs/alarms.md).
type Alarms struct {
	// HistoryTarget is the store-and-forward target every alarm transition
	// is enqueued to (by the Active, once per transition); empty keeps no
	// alarm history.
	HistoryTarget string `yaml:"history_target,omitempty"`
	// Sources are the native alarm sources subscribed on gateway
	// connections.
	Sources []AlarmSource `yaml:"sources,omitempty"`
	// Limits are alarms scadad evaluates from attribute values.
	Limits []LimitAlarm `yaml:"limits,omitempty"`
}

// AlarmSource is one gateway alarm source (an object or tag whose alarms
// the gateway reports) on an MxAccess connection.
type AlarmSource struct {
	Connection string `yaml:"connection"`
	Source     string `yaml:"source"`
}

// LimitAlarm is an exclusive limit alarm on a numeric attribute: in at
// most one of its levels at a time.
type LimitAlarm struct {
	// Name is the alarm's id; its source is the instance.
	Name      string      `yaml:"name"`
	Instance  string      `yaml:"instance"`
	Attribute string      `yaml:"attribute"`
	HiHi      *LimitLevel `yaml:"hi_hi,omitempty"`
	Hi        *LimitLevel `yaml:"hi,omitempty"`
	Lo        *LimitLevel `yaml:"lo,omitempty"`
	LoLo      *LimitLevel `yaml:"lo_lo,omitempty"`
	// Deadband is how far back past a limit the value must come to leave
	// the level.
	Deadband float64 `yaml:"deadband,omitempty"`
	// OnDelay is how long the value must stay in a level before the alarm
	// enters it.
	OnDelay time.Duration `yaml:"on_delay,omitempty"`
	Message string        `yaml:"message,omitempty"`
}

// LimitLevel is one level of a limit alarm: in alarm at or beyond Limit
// (at or above for hi levels, at or below for lo levels).
type LimitLevel struct {
	Limit    float64 `yaml:"limit"`
	Severity int     `yaml:"severity"`
}
