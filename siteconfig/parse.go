package siteconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// MaxArtifactBytes is the largest site configuration Parse accepts. A
// generated 50 × 250-tag site is about 5 MB; the ceiling leaves room while
// keeping a mistaken push from exhausting memory on every node.
const MaxArtifactBytes = 64 << 20

// The defaults Parse fills in for fields left out (or zero).
const (
	DefaultMxCommandTimeout      = 60 * time.Second
	DefaultMxInFlightMargin      = 15 * time.Second // in_flight_ceiling = command_timeout + margin
	DefaultMxBackoffFloor        = 5 * time.Second
	DefaultMxBackoffMax          = 60 * time.Second
	DefaultUASecurityPolicy      = "None"
	DefaultUASecurityMode        = "None"
	DefaultUARequestTimeout      = 10 * time.Second
	DefaultUAPublishingInterval  = time.Second
	DefaultUABackoffFloor        = 5 * time.Second
	DefaultUABackoffMax          = 60 * time.Second
	DefaultTargetTimeout         = 30 * time.Second
	DefaultTargetBackoffFloor    = time.Second
	DefaultTargetBackoffMax      = 5 * time.Minute
	DefaultTargetMaxPayloadBytes = 1 << 20
	DefaultHistoryMode           = HistoryOnChange
	DefaultHistoryMaxBatch       = 500
	DefaultHistoryMaxBatchDelay  = time.Second
	DefaultServerEndpoint        = "opc.tcp://0.0.0.0:4840"
	DefaultServerMaxSessions     = 100
)

// Parse decodes a site configuration strictly, fills in defaults and
// validates it. It never returns a nil site with a nil error: empty input,
// unknown fields, a YAML error (which names its line), an unsupported
// version and every validation problem (a *ValidationError) are errors.
func Parse(data []byte) (*Site, error) {
	site, err := Decode(data)
	if unknown := unknownFields(err); unknown != nil {
		// Unknown fields stop strict decoding; list them together with
		// what the validator finds in the rest, as every problem is.
		return nil, withValidation(unknown, data)
	}
	if err != nil {
		return nil, err
	}
	if err := site.Validate(); err != nil {
		return nil, err
	}
	return site, nil
}

// Decode is Parse without validation: for tools that want to show a
// configuration's problems next to its content. Its result must not be
// handed to workers unvalidated.
func Decode(data []byte) (*Site, error) {
	if len(data) > MaxArtifactBytes {
		return nil, fmt.Errorf("decode site config: %d bytes exceeds the %d-byte limit", len(data), MaxArtifactBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("decode site config: empty document")
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	site := new(Site)
	if err := dec.Decode(site); err != nil {
		// A newer schema fails strict decoding with unknown fields; say
		// what is really wrong.
		if v, ok := headerVersion(data); ok {
			if verr := checkVersion(v); verr != nil {
				return nil, verr
			}
		}
		return nil, fmt.Errorf("decode site config: %w", err)
	}
	if err := checkVersion(site.Version); err != nil {
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("decode site config: after the first document: %w", err)
		}
		return nil, fmt.Errorf("decode site config: line %d: a second YAML document; a site config is one document", extra.Line)
	}
	site.ApplyDefaults()
	return site, nil
}

// headerVersion reads only the version field; false when even that fails.
func headerVersion(data []byte) (int, bool) {
	var header struct {
		Version int `yaml:"version"`
	}
	if err := yaml.Unmarshal(data, &header); err != nil {
		return 0, false
	}
	return header.Version, true
}

func checkVersion(v int) error {
	switch v {
	case CurrentVersion:
		return nil
	case 0:
		return fmt.Errorf("decode site config: version: missing (this build reads version %d)", CurrentVersion)
	default:
		return fmt.Errorf("decode site config: version: unsupported %d (this build reads version %d)", v, CurrentVersion)
	}
}

// ApplyDefaults fills every zero field that has a default. Parse and Decode
// call it; a Site built in Go should call it before Validate.
func (s *Site) ApplyDefaults() {
	for i := range s.Connections {
		c := &s.Connections[i]
		if m := c.MxAccess; m != nil {
			setDuration(&m.CommandTimeout, DefaultMxCommandTimeout)
			setDuration(&m.InFlightCeiling, m.CommandTimeout+DefaultMxInFlightMargin)
			setDuration(&m.BackoffFloor, DefaultMxBackoffFloor)
			setDuration(&m.BackoffMax, DefaultMxBackoffMax)
			if m.PreferBulkSupervisory == nil {
				yes := true
				m.PreferBulkSupervisory = &yes
			}
		}
		if u := c.OPCUA; u != nil {
			setString(&u.SecurityPolicy, DefaultUASecurityPolicy)
			setString(&u.SecurityMode, DefaultUASecurityMode)
			if u.Identity.Type == "" {
				u.Identity.Type = IdentityAnonymous
			}
			setDuration(&u.RequestTimeout, DefaultUARequestTimeout)
			setDuration(&u.PublishingInterval, DefaultUAPublishingInterval)
			setDuration(&u.BackoffFloor, DefaultUABackoffFloor)
			setDuration(&u.BackoffMax, DefaultUABackoffMax)
		}
	}
	for i := range s.Targets {
		t := &s.Targets[i]
		setDuration(&t.Timeout, DefaultTargetTimeout)
		setDuration(&t.BackoffFloor, DefaultTargetBackoffFloor)
		setDuration(&t.BackoffMax, DefaultTargetBackoffMax)
		if t.MaxPayloadBytes == 0 {
			t.MaxPayloadBytes = DefaultTargetMaxPayloadBytes
		}
		if t.MaxInFlight == 0 {
			t.MaxInFlight = 1
		}
	}
	for i := range s.History {
		h := &s.History[i]
		if h.Mode == "" {
			h.Mode = DefaultHistoryMode
		}
		if h.MaxBatch == 0 {
			h.MaxBatch = DefaultHistoryMaxBatch
		}
		setDuration(&h.MaxBatchDelay, DefaultHistoryMaxBatchDelay)
	}
	setString(&s.OPCUA.Endpoint, DefaultServerEndpoint)
	if s.OPCUA.MaxSessions == 0 {
		s.OPCUA.MaxSessions = DefaultServerMaxSessions
	}
}

func setDuration(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}

func setString(s *string, def string) {
	if *s == "" {
		*s = def
	}
}

// unknownFields returns the problems of a decode that failed only on
// fields the schema does not have, nil for any other outcome.
func unknownFields(err error) []Problem {
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return nil
	}
	var out []Problem
	for _, e := range te.Errors {
		// "line 29: field retries not found in type siteconfig.Target"
		line, rest, ok := strings.Cut(e, ": ")
		if !ok || !strings.HasPrefix(rest, "field ") || !strings.Contains(rest, " not found in type ") {
			return nil
		}
		field, typ, _ := strings.Cut(strings.TrimPrefix(rest, "field "), " not found in type ")
		out = append(out, Problem{Path: line, Msg: fmt.Sprintf("unknown field %q (in a %s)", field, strings.TrimPrefix(typ, "siteconfig."))})
	}
	return out
}

// withValidation adds to the unknown-field problems what validation finds
// in the document decoded without them.
func withValidation(unknown []Problem, data []byte) error {
	verr := &ValidationError{Problems: unknown}
	site := new(Site)
	if yaml.Unmarshal(data, site) != nil {
		return verr
	}
	site.ApplyDefaults()
	var more *ValidationError
	if errors.As(site.Validate(), &more) {
		verr.Problems = append(verr.Problems, more.Problems...)
		verr.Truncated = more.Truncated
	}
	return verr
}
