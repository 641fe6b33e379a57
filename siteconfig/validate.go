package siteconfig

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gopcua/opcua/ua"
)

// Limits that keep a configuration sane; a value beyond them is almost
// certainly a typo (milliseconds written as seconds, an extra zero).
const (
	MaxNameLength       = 128
	MaxTagLength        = 1024
	MaxTextLength       = 4096
	MaxDuration         = 24 * time.Hour
	MinSampleInterval   = 100 * time.Millisecond
	MaxPayloadBytes     = 16 << 20 // one message must fit comfortably in a Raft entry
	MaxHistoryBatch     = 100000
	MaxServerSessions   = 10000
	MaxTargetAttempts   = 1000000
	MaxTargetInFlight   = 64
	MaxTargetBatch      = 10000
	MaxTargetBatchBytes = 64 << 20
	maxProblemsReported = 1000
)

// Problem is one thing wrong with a configuration, at the path of the field
// (for example "instances[3].attributes[12].tag").
type Problem struct {
	Path string
	Msg  string
}

func (p Problem) String() string { return p.Path + ": " + p.Msg }

// ValidationError lists every problem found, in document order.
type ValidationError struct {
	Problems []Problem
	// Truncated counts problems found but not listed beyond the first
	// maxProblemsReported, so a generated mistake cannot flood the log.
	Truncated int
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "invalid site config: %d problem", len(e.Problems)+e.Truncated)
	if len(e.Problems)+e.Truncated != 1 {
		b.WriteString("s")
	}
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	if e.Truncated > 0 {
		fmt.Fprintf(&b, "\n  ... and %d more", e.Truncated)
	}
	return b.String()
}

// Validate checks the site as it is (defaults are not applied) and returns
// a *ValidationError listing every problem, or nil.
func (s *Site) Validate() error {
	if s == nil {
		return &ValidationError{Problems: []Problem{{Path: "", Msg: "no site configuration"}}}
	}
	v := &validator{}
	v.site(s)
	if len(v.problems) == 0 && v.truncated == 0 {
		return nil
	}
	return &ValidationError{Problems: v.problems, Truncated: v.truncated}
}

type validator struct {
	problems  []Problem
	truncated int
}

func (v *validator) add(path, format string, args ...any) {
	if len(v.problems) >= maxProblemsReported {
		v.truncated++
		return
	}
	v.problems = append(v.problems, Problem{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func at(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

func field(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func (v *validator) site(s *Site) {
	if s.Version != CurrentVersion {
		v.add("version", "unsupported %d (this build reads version %d)", s.Version, CurrentVersion)
	}
	v.name("name", s.Name)

	connKinds := make(map[string]ConnectionKind, len(s.Connections))
	seen := make(map[string]int)
	for i := range s.Connections {
		c := &s.Connections[i]
		p := at("connections", i)
		if v.name(field(p, "name"), c.Name) {
			v.unique(seen, "connections", i, c.Name)
		}
		v.connection(p, c)
		if _, dup := connKinds[c.Name]; !dup {
			connKinds[c.Name] = c.Kind
		}
	}
	if len(s.Connections) == 0 {
		v.add("connections", "empty: a site needs at least one data connection")
	}

	attrs := make(map[string]map[string]DataType, len(s.Instances))
	seen = make(map[string]int)
	for i := range s.Instances {
		in := &s.Instances[i]
		p := at("instances", i)
		if v.name(field(p, "name"), in.Name) {
			v.unique(seen, "instances", i, in.Name)
		}
		v.instance(p, in, connKinds)
		if _, dup := attrs[in.Name]; !dup {
			types := make(map[string]DataType, len(in.Attributes))
			for _, a := range in.Attributes {
				if _, dup := types[a.Name]; !dup {
					types[a.Name] = a.Type
				}
			}
			attrs[in.Name] = types
		}
	}
	if len(s.Instances) == 0 {
		v.add("instances", "empty: a site needs at least one instance")
	}

	targets := make(map[string]bool, len(s.Targets))
	seen = make(map[string]int)
	for i := range s.Targets {
		t := &s.Targets[i]
		p := at("targets", i)
		if v.name(field(p, "name"), t.Name) {
			v.unique(seen, "targets", i, t.Name)
		}
		v.target(p, t)
		targets[t.Name] = true
	}

	seen = make(map[string]int)
	for i := range s.History {
		h := &s.History[i]
		p := at("history", i)
		if v.name(field(p, "name"), h.Name) {
			v.unique(seen, "history", i, h.Name)
		}
		v.history(p, h, targets, attrs)
	}

	v.historyFormats(s)
	v.alarms("alarms", &s.Alarms, connKinds, targets, attrs)
	v.server("opcua", &s.OPCUA)
}

func (v *validator) alarms(p string, a *Alarms, conns map[string]ConnectionKind, targets map[string]bool, attrs map[string]map[string]DataType) {
	if a.HistoryTarget != "" && !targets[a.HistoryTarget] {
		v.add(field(p, "history_target"), "unknown target %q", a.HistoryTarget)
	}
	seen := map[[2]string]int{}
	for i, src := range a.Sources {
		sp := at(field(p, "sources"), i)
		kind, ok := conns[src.Connection]
		switch {
		case src.Connection == "":
			v.add(field(sp, "connection"), "empty")
		case !ok:
			v.add(field(sp, "connection"), "unknown connection %q", src.Connection)
		case kind != KindMxAccess:
			v.add(field(sp, "connection"), "connection %q is %s: native alarm sources need an mxaccess connection", src.Connection, kind)
		}
		if src.Source == "" {
			v.add(field(sp, "source"), "empty")
		} else {
			v.text(field(sp, "source"), src.Source, 512)
		}
		k := [2]string{src.Connection, src.Source}
		if first, dup := seen[k]; dup {
			v.add(field(sp, "source"), "duplicate %q on connection %q (also %s[%d])", src.Source, src.Connection, field(p, "sources"), first)
		} else {
			seen[k] = i
		}
	}
	names := map[string]int{}
	for i := range a.Limits {
		l := &a.Limits[i]
		lp := at(field(p, "limits"), i)
		if v.name(field(lp, "name"), l.Name) {
			v.unique(names, field(p, "limits"), i, l.Name)
		}
		types, ok := attrs[l.Instance]
		switch {
		case l.Instance == "":
			v.add(field(lp, "instance"), "empty")
		case !ok:
			v.add(field(lp, "instance"), "unknown instance %q", l.Instance)
		default:
			t, ok := types[l.Attribute]
			switch {
			case l.Attribute == "":
				v.add(field(lp, "attribute"), "empty")
			case !ok:
				v.add(field(lp, "attribute"), "instance %q has no attribute %q", l.Instance, l.Attribute)
			case !t.Numeric():
				v.add(field(lp, "attribute"), "%s.%s is %s: limit alarms need a numeric attribute", l.Instance, l.Attribute, t)
			}
		}
		var prev *float64
		var prevName string
		levels := 0
		for _, lv := range []struct {
			name string
			l    *LimitLevel
		}{{"lo_lo", l.LoLo}, {"lo", l.Lo}, {"hi", l.Hi}, {"hi_hi", l.HiHi}} {
			if lv.l == nil {
				continue
			}
			levels++
			vp := field(lp, lv.name)
			if math.IsNaN(lv.l.Limit) || math.IsInf(lv.l.Limit, 0) {
				v.add(field(vp, "limit"), "%v must be a finite number", lv.l.Limit)
			} else if prev != nil && lv.l.Limit <= *prev {
				v.add(field(vp, "limit"), "%v must be above %s's %v (lo_lo < lo < hi < hi_hi)", lv.l.Limit, prevName, *prev)
			}
			if lv.l.Severity < 1 || lv.l.Severity > 1000 {
				v.add(field(vp, "severity"), "%d outside 1..1000", lv.l.Severity)
			}
			x := lv.l.Limit
			prev, prevName = &x, lv.name
		}
		if levels == 0 {
			v.add(lp, "no levels: set at least one of hi_hi, hi, lo, lo_lo")
		}
		if math.IsNaN(l.Deadband) || math.IsInf(l.Deadband, 0) || l.Deadband < 0 {
			v.add(field(lp, "deadband"), "%v must be a finite number >= 0", l.Deadband)
		}
		if l.OnDelay < 0 {
			v.add(field(lp, "on_delay"), "%v must be >= 0", l.OnDelay)
		}
		v.text(field(lp, "message"), l.Message, 4096)
	}
}

// name checks an identifier and reports whether it is usable for the
// duplicate and reference checks that follow.
func (v *validator) name(path, name string) bool {
	switch {
	case name == "":
		v.add(path, "empty")
		return false
	case len(name) > MaxNameLength:
		v.add(path, "longer than %d bytes", MaxNameLength)
		return false
	}
	for i, r := range name {
		ok := r == '_' || r == '-' || r == '.' || (r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r)))
		if !ok || (i == 0 && (r == '.' || r == '-')) {
			v.add(path, "%q: use letters, digits, '_', '-' and '.' (not first)", name)
			return false
		}
	}
	return true
}

// unique reports a name seen before in the list at listPath; i is the
// index of the entry being checked.
func (v *validator) unique(seen map[string]int, listPath string, i int, name string) {
	if first, dup := seen[name]; dup {
		v.add(field(at(listPath, i), "name"), "duplicate %q (also %s[%d])", name, listPath, first)
		return
	}
	seen[name] = i
}

func (v *validator) text(path, s string, limit int) {
	if len(s) > limit {
		v.add(path, "longer than %d bytes", limit)
	}
	if !utf8.ValidString(s) {
		v.add(path, "not valid UTF-8")
	}
}

func (v *validator) positive(path string, d time.Duration) bool {
	switch {
	case d <= 0:
		v.add(path, "must be positive (was %s)", d)
		return false
	case d > MaxDuration:
		v.add(path, "%s is longer than %s", d, MaxDuration)
		return false
	}
	return true
}

func (v *validator) backoff(path string, floor, max time.Duration) {
	okFloor := v.positive(field(path, "backoff_floor"), floor)
	okMax := v.positive(field(path, "backoff_max"), max)
	if okFloor && okMax && max < floor {
		v.add(field(path, "backoff_max"), "%s is below backoff_floor %s", max, floor)
	}
}

func (v *validator) connection(p string, c *Connection) {
	switch c.Kind {
	case KindMxAccess:
		if c.MxAccess == nil {
			v.add(field(p, "mxaccess"), "missing for kind %q", c.Kind)
		}
		if c.OPCUA != nil {
			v.add(field(p, "opcua"), "set on a connection of kind %q", c.Kind)
		}
	case KindOPCUA:
		if c.OPCUA == nil {
			v.add(field(p, "opcua"), "missing for kind %q", c.Kind)
		}
		if c.MxAccess != nil {
			v.add(field(p, "mxaccess"), "set on a connection of kind %q", c.Kind)
		}
	case "":
		v.add(field(p, "kind"), "empty (one of mxaccess, opcua)")
	default:
		v.add(field(p, "kind"), "unknown %q (one of mxaccess, opcua)", c.Kind)
	}
	if m := c.MxAccess; m != nil {
		mp := field(p, "mxaccess")
		v.hostPort(field(mp, "endpoint"), m.Endpoint)
		if m.WriteUserID < 0 {
			v.add(field(mp, "write_user_id"), "negative (%d)", m.WriteUserID)
		}
		okTimeout := v.positive(field(mp, "command_timeout"), m.CommandTimeout)
		okCeiling := v.positive(field(mp, "in_flight_ceiling"), m.InFlightCeiling)
		// A ceiling at or below the gateway's own deadline presumes a reply
		// lost while the gateway may still be working on it: the re-storm
		// of the 2026-08-26 freeze.
		if okTimeout && okCeiling && m.InFlightCeiling <= m.CommandTimeout {
			v.add(field(mp, "in_flight_ceiling"), "%s must exceed command_timeout %s", m.InFlightCeiling, m.CommandTimeout)
		}
		v.backoff(mp, m.BackoffFloor, m.BackoffMax)
		if m.PreferBulkSupervisory == nil {
			v.add(field(mp, "prefer_bulk_supervisory"), "not set (defaults apply only through Parse or ApplyDefaults)")
		}
	}
	if u := c.OPCUA; u != nil {
		up := field(p, "opcua")
		v.opcURL(field(up, "endpoint"), u.Endpoint)
		v.security(up, "security_policy", "security_mode", u.SecurityPolicy, u.SecurityMode)
		if u.SecurityMode != "" && u.SecurityMode != "None" {
			if u.CertificateFile == "" {
				v.add(field(up, "certificate_file"), "empty: required with security_mode %s", u.SecurityMode)
			}
			if u.PrivateKeyFile == "" {
				v.add(field(up, "private_key_file"), "empty: required with security_mode %s", u.SecurityMode)
			}
		} else if u.ServerCertificateFile != "" {
			v.add(field(up, "server_certificate_file"), "set, but security_mode None exchanges no certificate")
		}
		ip := field(up, "identity")
		switch u.Identity.Type {
		case IdentityAnonymous:
			if u.Identity.Username != "" || u.Identity.PasswordFile != "" {
				v.add(ip, "username and password_file are for type username")
			}
		case IdentityUsername:
			if u.Identity.Username == "" {
				v.add(field(ip, "username"), "empty")
			}
			if u.Identity.PasswordFile == "" {
				v.add(field(ip, "password_file"), "empty")
			}
		default:
			v.add(field(ip, "type"), "unknown %q (one of anonymous, username)", u.Identity.Type)
		}
		v.positive(field(up, "request_timeout"), u.RequestTimeout)
		v.positive(field(up, "publishing_interval"), u.PublishingInterval)
		v.backoff(up, u.BackoffFloor, u.BackoffMax)
	}
}

func (v *validator) hostPort(path, s string) {
	if s == "" {
		v.add(path, "empty")
		return
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		v.add(path, "%q is not host:port: %v", s, err)
		return
	}
	if host == "" {
		v.add(path, "%q has no host", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		v.add(path, "%q: port must be 1-65535", s)
	}
}

func (v *validator) opcURL(path, s string) {
	if s == "" {
		v.add(path, "empty")
		return
	}
	u, err := url.Parse(s)
	if err != nil {
		v.add(path, "%q is not a URL: %v", s, err)
		return
	}
	if u.Scheme != "opc.tcp" {
		v.add(path, "%q: scheme must be opc.tcp", s)
		return
	}
	if u.Hostname() == "" {
		v.add(path, "%q has no host", s)
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			v.add(path, "%q: port must be 1-65535", s)
		}
	}
}

var securityModes = []string{"None", "Sign", "SignAndEncrypt"}

func (v *validator) security(p, policyKey, modeKey, policy, mode string) {
	_, okPolicy := ua.SecurityPolicyURIs[policy]
	if !okPolicy {
		v.add(field(p, policyKey), "unknown %q (one of %s)", policy, policyNames())
	}
	okMode := false
	for _, m := range securityModes {
		okMode = okMode || m == mode
	}
	if !okMode {
		v.add(field(p, modeKey), "unknown %q (one of %s)", mode, strings.Join(securityModes, ", "))
	}
	if okPolicy && okMode && (policy == "None") != (mode == "None") {
		v.add(field(p, modeKey), "%s does not go with policy %s (None goes only with None)", mode, policy)
	}
}

func policyNames() string {
	// Fixed order: ua.SecurityPolicyURIs is a map.
	return "None, Basic128Rsa15, Basic256, Basic256Sha256, Aes128Sha256RsaOaep, Aes256Sha256RsaPss"
}

func (v *validator) instance(p string, in *Instance, conns map[string]ConnectionKind) {
	kind, okConn := v.connRef(field(p, "connection"), in.Connection, conns, true)
	v.text(field(p, "description"), in.Description, MaxTextLength)
	if len(in.Attributes) == 0 {
		v.add(field(p, "attributes"), "empty: an instance needs at least one attribute")
	}
	seen := make(map[string]int, len(in.Attributes))
	for j := range in.Attributes {
		a := &in.Attributes[j]
		ap := at(field(p, "attributes"), j)
		if v.name(field(ap, "name"), a.Name) {
			v.unique(seen, field(p, "attributes"), j, a.Name)
		}
		switch a.Type {
		case TypeBool, TypeInt32, TypeInt64, TypeFloat, TypeDouble, TypeString:
		case "":
			v.add(field(ap, "type"), "empty (one of bool, int32, int64, float, double, string)")
		default:
			v.add(field(ap, "type"), "unknown %q (one of bool, int32, int64, float, double, string)", a.Type)
		}
		attrKind, okAttrConn := kind, okConn
		if a.Connection != "" {
			attrKind, okAttrConn = v.connRef(field(ap, "connection"), a.Connection, conns, false)
		}
		v.tag(field(ap, "tag"), a.Tag, attrKind, okAttrConn)
		v.text(field(ap, "description"), a.Description, MaxTextLength)
		v.text(field(ap, "units"), a.Units, MaxNameLength)
		if r := a.EURange; r != nil {
			switch {
			case !a.Type.Numeric():
				v.add(field(ap, "eu_range"), "set on a %s attribute; only numeric attributes (int32, int64, float, double) have a range", a.Type)
			case math.IsNaN(r.Low) || math.IsInf(r.Low, 0) || math.IsNaN(r.High) || math.IsInf(r.High, 0):
				v.add(field(ap, "eu_range"), "low %v and high %v must be finite numbers", r.Low, r.High)
			case r.Low >= r.High:
				v.add(field(ap, "eu_range"), "low %v must be below high %v", r.Low, r.High)
			}
		}
	}
}

func (v *validator) connRef(path, name string, conns map[string]ConnectionKind, required bool) (ConnectionKind, bool) {
	if name == "" {
		if required {
			v.add(path, "empty")
		}
		return "", false
	}
	kind, ok := conns[name]
	if !ok {
		v.add(path, "unknown connection %q", name)
	}
	return kind, ok
}

func (v *validator) tag(path, tag string, kind ConnectionKind, kindKnown bool) {
	switch {
	case strings.TrimSpace(tag) == "":
		v.add(path, "empty")
		return
	case len(tag) > MaxTagLength:
		v.add(path, "longer than %d bytes", MaxTagLength)
		return
	case tag != strings.TrimSpace(tag):
		v.add(path, "%q has leading or trailing space", tag)
		return
	case !utf8.ValidString(tag):
		v.add(path, "not valid UTF-8")
		return
	}
	if kindKnown && kind == KindOPCUA {
		if err := checkNodeID(tag); err != nil {
			v.add(path, "%q is not an OPC UA NodeId: %v", tag, err)
		}
	}
}

// checkNodeID accepts ns=<n>;<id> and nsu=<uri>;<id> with an explicit
// identifier type (i=, s=, g=, b=). A bare string, which the SDK reads as
// a namespace-0 string id, is almost always a forgotten prefix.
func checkNodeID(tag string) error {
	nsPart, id, ok := strings.Cut(tag, ";")
	if !ok {
		return errors.New("want ns=<index>;<type>=<id> or nsu=<uri>;<type>=<id>")
	}
	if uri, isURI := strings.CutPrefix(nsPart, "nsu="); isURI {
		if uri == "" {
			return errors.New("empty namespace URI")
		}
		// The SDK resolves URIs against the server's namespace array at
		// run time; the syntax of the rest is checked as namespace 1.
		nsPart = "ns=1"
	}
	if len(id) < 2 || id[1] != '=' || !strings.ContainsRune("isgb", rune(id[0])) {
		return errors.New("identifier needs an explicit type: i=, s=, g= or b=")
	}
	_, err := ua.ParseNodeID(nsPart + ";" + id)
	return err
}

func (v *validator) target(p string, t *Target) {
	switch t.Kind {
	case "", TargetHTTP:
		if t.Postgres != nil {
			v.add(field(p, "postgres"), "only for kind postgres")
		}
		if t.MQTT != nil {
			v.add(field(p, "mqtt"), "only for kind mqtt")
		}
		v.httpTarget(p, t)
	case TargetPostgres:
		v.postgresTarget(p, t)
	case TargetMQTT:
		v.mqttTarget(p, t)
	default:
		v.add(field(p, "kind"), "unknown %q: want http, postgres or mqtt", t.Kind)
	}
	v.positive(field(p, "timeout"), t.Timeout)
	v.backoff(p, t.BackoffFloor, t.BackoffMax)
	if t.MaxAttempts < 0 || t.MaxAttempts > MaxTargetAttempts {
		v.add(field(p, "max_attempts"), "%d is outside 0..%d (0 never parks)", t.MaxAttempts, MaxTargetAttempts)
	}
	if t.MaxPayloadBytes < 1 || t.MaxPayloadBytes > MaxPayloadBytes {
		v.add(field(p, "max_payload_bytes"), "%d is outside 1..%d", t.MaxPayloadBytes, MaxPayloadBytes)
	}
	if t.MaxInFlight < 1 || t.MaxInFlight > MaxTargetInFlight {
		v.add(field(p, "max_in_flight"), "%d is outside 1..%d", t.MaxInFlight, MaxTargetInFlight)
	}
	if t.MaxPending < 0 {
		v.add(field(p, "max_pending"), "%d is negative (0 sets no cap)", t.MaxPending)
	}
	if t.BatchMaxMessages < 0 || t.BatchMaxMessages > MaxTargetBatch {
		v.add(field(p, "batch_max_messages"), "%d is outside 0..%d (0 and 1 send one message per request)", t.BatchMaxMessages, MaxTargetBatch)
	}
	if t.BatchMaxBytes < 0 || t.BatchMaxBytes > MaxTargetBatchBytes {
		v.add(field(p, "batch_max_bytes"), "%d is outside 0..%d (0: 4 MiB)", t.BatchMaxBytes, MaxTargetBatchBytes)
	}
}

var sqlStatePattern = regexp.MustCompile(`^[0-9A-Za-z]{2}[0-9A-Za-z]{3}$`)

var pgTable = regexp.MustCompile(`^([a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,62}$`)

// postgresTarget checks a kind postgres target: its postgres block, and
// none of the HTTP fields.
func (v *validator) postgresTarget(p string, t *Target) {
	v.notHTTP(p, t, "postgres", t.MQTT != nil, "mqtt")
	for i, code := range t.ParkOn {
		if !sqlStatePattern.MatchString(code) && !(code == "none" && len(t.ParkOn) == 1) {
			v.add(fmt.Sprintf("%s[%d]", field(p, "park_on"), i), `%q is not a SQLSTATE or class ("23514", "23xxx") or "none" alone`, code)
		}
	}
	pg := t.Postgres
	if pg == nil {
		v.add(field(p, "postgres"), "missing: kind postgres needs dsn and table")
		return
	}
	pp := field(p, "postgres")
	switch {
	case strings.TrimSpace(pg.DSN) == "":
		v.add(field(pp, "dsn"), "empty")
	case dsnHasPassword(pg.DSN):
		v.add(field(pp, "dsn"), "holds a password: put it in password_file, the DSN is stored in the site artifact")
	}
	if !pgTable.MatchString(pg.Table) {
		v.add(field(pp, "table"), "%q: want [schema.]name of lower-case letters, digits and _ (at most 63 each)", pg.Table)
	}
}

// notHTTP refuses the HTTP-only fields on a target of another kind, and
// the block of a third kind (other, when otherSet).
func (v *validator) notHTTP(p string, t *Target, kind string, otherSet bool, other string) {
	for _, f := range []struct {
		name string
		set  bool
	}{{"url", t.URL != ""}, {"headers", len(t.Headers) > 0}, {"ca_file", t.CAFile != ""}, {"batch_format", t.BatchFormat != ""}, {other, otherSet}} {
		if f.set {
			v.add(field(p, f.name), "not for kind %s", kind)
		}
	}
}

// mqttTarget checks a kind mqtt target.
func (v *validator) mqttTarget(p string, t *Target) {
	v.notHTTP(p, t, "mqtt", t.Postgres != nil, "postgres")
	for i, code := range t.ParkOn {
		if n, err := strconv.Atoi(code); (err != nil || n < 128 || n > 255) && !(code == "none" && len(t.ParkOn) == 1) {
			v.add(fmt.Sprintf("%s[%d]", field(p, "park_on"), i), `%q is not an MQTT failure reason code in decimal (128-255, "135") or "none" alone`, code)
		}
	}
	mq := t.MQTT
	if mq == nil {
		v.add(field(p, "mqtt"), "missing: kind mqtt needs broker and topic")
		return
	}
	mp := field(p, "mqtt")
	if u, err := url.Parse(mq.Broker); err != nil || u.Port() == "" || !slices.Contains([]string{"mqtt", "tcp", "tls", "mqtts", "ssl"}, u.Scheme) {
		v.add(field(mp, "broker"), "%q: want mqtt://host:port or tls://host:port", mq.Broker)
	} else if u.User != nil {
		v.add(field(mp, "broker"), "holds credentials: use username and password_file")
	}
	if sp := mq.Sparkplug; sp != nil {
		spp := field(mp, "sparkplug")
		if mq.Topic != "" {
			v.add(field(mp, "topic"), "set with sparkplug (Sparkplug makes the topics)")
		}
		for _, id := range []struct{ name, v string }{{"group_id", sp.GroupID}, {"edge_node", sp.EdgeNode}, {"primary_host", sp.PrimaryHost}} {
			if (id.v != "" || id.name != "primary_host") && (id.v == "" || strings.ContainsAny(id.v, "/+#\x00")) {
				v.add(field(spp, id.name), "%q: want a non-empty topic level without / + #", id.v)
			}
		}
	} else if mq.Topic == "" || strings.ContainsAny(mq.Topic, "#+\x00") {
		v.add(field(mp, "topic"), "%q: want a topic name without wildcards ({target}, {node}, {id} are replaced)", mq.Topic)
	}
	if (mq.CertFile == "") != (mq.KeyFile == "") {
		v.add(field(mp, "cert_file"), "cert_file and key_file go together")
	}
	if mq.SessionExpiry < 0 || mq.SessionExpiry > 0xffffffff*time.Second {
		v.add(field(mp, "session_expiry"), "%v is outside 0..136 years", mq.SessionExpiry)
	}
	switch mq.Protocol {
	case "", "5":
	case "3.1.1":
		if mq.Sparkplug != nil {
			v.add(field(mp, "protocol"), "3.1.1 with sparkplug: the Sparkplug edge node speaks MQTT 5")
		}
	default:
		v.add(field(mp, "protocol"), "%q: want 5 or 3.1.1", mq.Protocol)
	}
	if mq.InFlight < 0 || mq.InFlight > 65535 {
		v.add(field(mp, "in_flight"), "%d is outside 0..65535 (0: no bound but the batch and the broker's receive maximum)", mq.InFlight)
	}
}

// dsnHasPassword reports a password in a URL's user info or a key/value
// DSN's password= (pgx itself reads the DSN at delivery).
func dsnHasPassword(dsn string) bool {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		_, set := u.User.Password()
		return set || u.Query().Has("password")
	}
	for _, kv := range strings.Fields(dsn) {
		if k, _, ok := strings.Cut(kv, "="); ok && strings.TrimSpace(k) == "password" {
			return true
		}
	}
	return false
}

// httpTarget checks a kind http target's own fields.
func (v *validator) httpTarget(p string, t *Target) {
	if t.URL == "" {
		v.add(field(p, "url"), "empty")
	} else if u, err := url.Parse(t.URL); err != nil {
		v.add(field(p, "url"), "%q is not a URL: %v", t.URL, err)
	} else if u.Scheme != "http" && u.Scheme != "https" {
		v.add(field(p, "url"), "%q: scheme must be http or https", t.URL)
	} else if u.Host == "" {
		v.add(field(p, "url"), "%q has no host", t.URL)
	} else if t.CAFile != "" && u.Scheme != "https" {
		v.add(field(p, "ca_file"), "only for an https url, not %q", t.URL)
	}
	for _, k := range sortedKeys(t.Headers) {
		hp := field(field(p, "headers"), k)
		switch {
		case !isHeaderToken(k):
			v.add(hp, "not a valid header name")
		case reservedHeader(k):
			v.add(hp, "set by the delivery itself; cannot be configured")
		case strings.ContainsAny(t.Headers[k], "\r\n\x00"):
			v.add(hp, "value contains a line break or NUL")
		}
	}
	v.parkOn(field(p, "park_on"), t.ParkOn)
	switch t.BatchFormat {
	case "", "json", "ndjson":
	default:
		v.add(field(p, "batch_format"), "unknown %q: want json or ndjson", t.BatchFormat)
	}
}

// parkOn checks an HTTP target's park_on: "none" alone, or status codes
// and classes of three characters, the first 1-5, the others digits or x
// ("400", "4xx", "40x").
func (v *validator) parkOn(p string, parkOn []string) {
	for i, code := range parkOn {
		ip := fmt.Sprintf("%s[%d]", p, i)
		if code == "none" {
			if len(parkOn) > 1 {
				v.add(ip, `"none" must be the only entry`)
			}
			continue
		}
		ok := len(code) == 3 && code[0] >= '1' && code[0] <= '5'
		for j := 1; ok && j < 3; j++ {
			ok = code[j] == 'x' || code[j] >= '0' && code[j] <= '9'
		}
		if !ok {
			v.add(ip, `%q is not an HTTP status code or class ("400", "4xx", "40x") or "none"`, code)
		}
	}
}

func isHeaderToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

func reservedHeader(name string) bool {
	switch strings.ToLower(name) {
	case "idempotency-key", "content-length", "host", "transfer-encoding", "connection":
		return true
	}
	return false
}

// historyFormats checks that Sparkplug targets and rules of format
// sparkplug go together: a Sparkplug Edge Node publishes nothing else.
func (v *validator) historyFormats(s *Site) {
	sparkplug := map[string]bool{}
	for _, t := range s.Targets {
		if t.Kind == TargetMQTT && t.MQTT != nil && t.MQTT.Sparkplug != nil {
			sparkplug[t.Name] = true
		}
	}
	for i, h := range s.History {
		p := at("history", i)
		switch h.Format {
		case "", HistoryJSON:
			if sparkplug[h.Target] {
				v.add(field(p, "format"), "%q: target %s is a Sparkplug edge node (mqtt.sparkplug): want format sparkplug", h.Format, h.Target)
			}
		case HistorySparkplug:
			if !sparkplug[h.Target] {
				v.add(field(p, "format"), "sparkplug: target %q is not a Sparkplug edge node (a kind mqtt target with mqtt.sparkplug)", h.Target)
			}
		default:
			v.add(field(p, "format"), "unknown %q: want json or sparkplug", h.Format)
		}
	}
	if t := s.Alarms.HistoryTarget; sparkplug[t] {
		v.add(field("alarms", "history_target"), "%q is a Sparkplug edge node: it publishes tag history of format sparkplug only", t)
	}
}

func (v *validator) history(p string, h *HistoryRule, targets map[string]bool, attrs map[string]map[string]DataType) {
	if h.Target == "" {
		v.add(field(p, "target"), "empty")
	} else if !targets[h.Target] {
		v.add(field(p, "target"), "unknown target %q", h.Target)
	}
	if len(h.Select) == 0 {
		v.add(field(p, "select"), "empty: select at least one instance")
	}
	deadbandOK := !math.IsNaN(h.Deadband) && !math.IsInf(h.Deadband, 0) && h.Deadband >= 0
	if !deadbandOK {
		v.add(field(p, "deadband"), "%v must be a finite number >= 0", h.Deadband)
	}
	seen := make(map[string]int, len(h.Select))
	for k := range h.Select {
		sel := &h.Select[k]
		sp := at(field(p, "select"), k)
		types, ok := attrs[sel.Instance]
		switch {
		case sel.Instance == "":
			v.add(field(sp, "instance"), "empty")
		case !ok:
			v.add(field(sp, "instance"), "unknown instance %q", sel.Instance)
		default:
			if first, dup := seen[sel.Instance]; dup {
				v.add(field(sp, "instance"), "duplicate %q (also %s[%d])", sel.Instance, field(p, "select"), first)
			} else {
				seen[sel.Instance] = k
			}
		}
		seenAttr := make(map[string]int, len(sel.Attributes))
		for n, name := range sel.Attributes {
			np := at(field(sp, "attributes"), n)
			if name == "" {
				v.add(np, "empty")
				continue
			}
			if _, dup := seenAttr[name]; dup {
				v.add(np, "duplicate %q", name)
				continue
			}
			seenAttr[name] = n
			if !ok {
				continue
			}
			typ, known := types[name]
			switch {
			case !known:
				v.add(np, "instance %q has no attribute %q", sel.Instance, name)
			case deadbandOK && h.Deadband > 0 && !typ.Numeric():
				v.add(np, "deadband %v set but %q is %s, not numeric", h.Deadband, name, typ)
			}
		}
	}
	switch h.Mode {
	case HistoryOnChange:
		if h.SampleInterval != 0 {
			v.add(field(p, "sample_interval"), "set with mode on_change (only for mode sample)")
		}
	case HistorySample:
		if v.positive(field(p, "sample_interval"), h.SampleInterval) && h.SampleInterval < MinSampleInterval {
			v.add(field(p, "sample_interval"), "%s is below %s", h.SampleInterval, MinSampleInterval)
		}
	default:
		v.add(field(p, "mode"), "unknown %q (one of on_change, sample)", h.Mode)
	}
	if h.MaxBatch < 1 || h.MaxBatch > MaxHistoryBatch {
		v.add(field(p, "max_batch"), "%d is outside 1..%d", h.MaxBatch, MaxHistoryBatch)
	}
	v.positive(field(p, "max_batch_delay"), h.MaxBatchDelay)
}

func (v *validator) server(p string, o *OPCUAServer) {
	np := field(p, "namespace_uri")
	if o.NamespaceURI == "" {
		v.add(np, "empty")
	} else if u, err := url.Parse(o.NamespaceURI); err != nil || u.Scheme == "" {
		v.add(np, "%q is not an absolute URI (urn:... or http://...)", o.NamespaceURI)
	}
	v.opcURL(field(p, "endpoint"), o.Endpoint)
	if len(o.Security) == 0 {
		v.add(field(p, "security"), "empty: list at least one policy/mode pair")
	}
	seen := make(map[SecurityPair]int, len(o.Security))
	for i, pair := range o.Security {
		sp := at(field(p, "security"), i)
		v.security(sp, "policy", "mode", pair.Policy, pair.Mode)
		if first, dup := seen[pair]; dup {
			v.add(sp, "duplicate %s/%s (also security[%d])", pair.Policy, pair.Mode, first)
		} else {
			seen[pair] = i
		}
	}
	ip := field(p, "identities")
	// User names come from the replicated users (scadactl opcua users)
	// on any secure profile, so a secure site needs no users listed here.
	secure := false
	for _, pair := range o.Security {
		secure = secure || (pair.Mode != "" && pair.Mode != "None")
	}
	if !o.Identities.Anonymous && len(o.Identities.Users) == 0 && !secure {
		v.add(ip, "no identity accepted: allow anonymous, or offer a Sign or SignAndEncrypt profile for user names (scadactl opcua users set)")
	}
	if o.Identities.AnonymousCanWrite && !o.Identities.Anonymous {
		v.add(field(ip, "anonymous_can_write"), "set, but anonymous sessions are not accepted (anonymous: false)")
	}
	users := make(map[string]int, len(o.Identities.Users))
	for i, u := range o.Identities.Users {
		up := at(field(ip, "users"), i)
		if u.Username == "" {
			v.add(field(up, "username"), "empty")
		} else {
			v.text(field(up, "username"), u.Username, MaxNameLength)
			if first, dup := users[u.Username]; dup {
				v.add(field(up, "username"), "duplicate %q (also users[%d])", u.Username, first)
			} else {
				users[u.Username] = i
			}
		}
		if u.PasswordFile == "" {
			v.add(field(up, "password_file"), "empty")
		}
	}
	if o.MaxSessions < 1 || o.MaxSessions > MaxServerSessions {
		v.add(field(p, "max_sessions"), "%d is outside 1..%d", o.MaxSessions, MaxServerSessions)
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
