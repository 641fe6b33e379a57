package subscribe

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Config is what the workers subscribe. The daemon maps the site
// configuration onto it; keep it plain.
type Config struct {
	Connections []ConnectionConfig
	Instances   []InstanceConfig
	// AlarmSources are the alarm sources subscribed, each on a connection.
	AlarmSources []AlarmSourceConfig
	// HotStandby runs the workers (read-only) on a Standby node too.
	HotStandby bool
}

// ConnectionConfig is one gateway connection.
type ConnectionConfig struct {
	Name     string
	Endpoint string
	Options  ConnectionOptions
}

// ConnectionOptions tune one connection; zero values take the gateway
// client's defaults.
type ConnectionOptions struct {
	// CommandTimeout is the session command timeout asked for at open.
	CommandTimeout time.Duration
	// WriteUserID 0 means supervisory advise.
	WriteUserID   int32
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	// Policy is the subscribe retry of this connection's workers; zero
	// fields take the manager's (ManagerOptions.Policy).
	Policy RetryPolicy
	// LegacySubscribe never uses the bulk supervisory subscribe.
	LegacySubscribe bool
}

// InstanceConfig is the attributes of one equipment instance that come
// from tags on one connection. An instance whose attributes come from
// several connections appears once per connection, each with its own
// attributes; each gets its own worker.
type InstanceConfig struct {
	Name       string
	Connection string
	Attributes []Attribute
}

// key names the worker of in: unique per (connection, instance).
func (in InstanceConfig) key() string { return in.Connection + "\x00" + in.Name }

// Attribute maps an instance attribute to a tag address.
type Attribute struct {
	Name string
	Tag  string
}

// Validate reports every problem in c.
func (c Config) Validate() error {
	var errs []error
	conns := map[string]bool{}
	for i, cc := range c.Connections {
		switch {
		case cc.Name == "":
			errs = append(errs, fmt.Errorf("connections[%d]: name is empty", i))
		case conns[cc.Name]:
			errs = append(errs, fmt.Errorf("connections[%d]: duplicate name %q", i, cc.Name))
		}
		if cc.Endpoint == "" {
			errs = append(errs, fmt.Errorf("connections[%d] %q: endpoint is empty", i, cc.Name))
		}
		conns[cc.Name] = true
	}
	insts := map[string]bool{}
	// attrs holds every attribute name of each instance, over all its
	// connections: a name must say which tag a write goes to.
	attrs := map[string]map[string]bool{}
	for i, in := range c.Instances {
		switch {
		case in.Name == "":
			errs = append(errs, fmt.Errorf("instances[%d]: name is empty", i))
		case insts[in.key()]:
			errs = append(errs, fmt.Errorf("instances[%d]: instance %q listed twice for connection %q", i, in.Name, in.Connection))
		}
		insts[in.key()] = true
		if !conns[in.Connection] {
			errs = append(errs, fmt.Errorf("instances[%d] %q: unknown connection %q", i, in.Name, in.Connection))
		}
		if attrs[in.Name] == nil {
			attrs[in.Name] = map[string]bool{}
		}
		for j, a := range in.Attributes {
			if a.Name == "" || a.Tag == "" {
				errs = append(errs, fmt.Errorf("instances[%d] %q attributes[%d]: name and tag are required", i, in.Name, j))
			}
			if attrs[in.Name][a.Name] {
				errs = append(errs, fmt.Errorf("instances[%d] %q attributes[%d]: duplicate attribute %q", i, in.Name, j, a.Name))
			}
			attrs[in.Name][a.Name] = true
		}
	}
	alarms := map[string]bool{}
	for i, a := range c.AlarmSources {
		switch {
		case a.Source == "":
			errs = append(errs, fmt.Errorf("alarm_sources[%d]: source is empty", i))
		case alarms[a.key()]:
			errs = append(errs, fmt.Errorf("alarm_sources[%d]: source %q listed twice for connection %q", i, a.Source, a.Connection))
		}
		alarms[a.key()] = true
		if !conns[a.Connection] {
			errs = append(errs, fmt.Errorf("alarm_sources[%d] %q: unknown connection %q", i, a.Source, a.Connection))
		}
	}
	return errors.Join(errs...)
}

func (c Config) clone() Config {
	out := Config{Connections: slices.Clone(c.Connections), Instances: make([]InstanceConfig, len(c.Instances)), HotStandby: c.HotStandby,
		AlarmSources: slices.Clone(c.AlarmSources)}
	for i, in := range c.Instances {
		in.Attributes = slices.Clone(in.Attributes)
		out.Instances[i] = in
	}
	return out
}

func (in InstanceConfig) equal(other InstanceConfig) bool {
	return in.Name == other.Name && in.Connection == other.Connection && slices.Equal(in.Attributes, other.Attributes)
}
