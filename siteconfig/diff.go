package siteconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ChangeKind says what happened to a named entry between two sites.
type ChangeKind string

// The change kinds.
const (
	Added   ChangeKind = "added"
	Removed ChangeKind = "removed"
	Changed ChangeKind = "changed"
)

func (k ChangeKind) sign() string {
	switch k {
	case Added:
		return "+"
	case Removed:
		return "-"
	default:
		return "~"
	}
}

// FieldChange is one leaf field whose value differs, by its dotted YAML
// path inside the entry (for example "mxaccess.command_timeout"). Header
// values are rendered as a short hash, never in clear.
type FieldChange struct {
	Field string
	Old   string
	New   string
}

// Change is what happened to one named entry. Fields lists the differing
// leaf fields of a Changed entry, and every field of an Added (Old empty)
// or Removed (New empty) one.
type Change struct {
	Kind   ChangeKind
	Name   string
	Fields []FieldChange
}

// InstanceChange is a Change of an instance; Attributes lists what happened
// to its attributes (for an Added or Removed instance, every attribute).
// An instance is Changed when its own fields or any attribute changed.
type InstanceChange struct {
	Change
	Attributes []Change
}

// Changes is the difference between two sites, per kind of entry, each
// list sorted by name. Workers reconfigure by it: a subscribe worker
// restarts only for its changed (connection, instance), the OPC UA server
// adds and removes only the variables that came and went.
type Changes struct {
	// Site lists changed top-level fields (name, version, hot_standby).
	Site        []FieldChange
	Connections []Change
	Instances   []InstanceChange
	Targets     []Change
	History     []Change
	// OPCUA lists changed OPC UA server fields.
	OPCUA []FieldChange
}

// Empty reports whether the two sites mean the same thing.
func (c Changes) Empty() bool {
	return len(c.Site) == 0 && len(c.Connections) == 0 && len(c.Instances) == 0 &&
		len(c.Targets) == 0 && len(c.History) == 0 && len(c.OPCUA) == 0
}

// Connection returns the change of the named connection, if any.
func (c Changes) Connection(name string) (Change, bool) { return findChange(c.Connections, name) }

// Target returns the change of the named target, if any.
func (c Changes) Target(name string) (Change, bool) { return findChange(c.Targets, name) }

// HistoryRule returns the change of the named history rule, if any.
func (c Changes) HistoryRule(name string) (Change, bool) { return findChange(c.History, name) }

// Instance returns the change of the named instance, if any.
func (c Changes) Instance(name string) (InstanceChange, bool) {
	i, ok := slices.BinarySearchFunc(c.Instances, name, func(ic InstanceChange, n string) int { return strings.Compare(ic.Name, n) })
	if !ok {
		return InstanceChange{}, false
	}
	return c.Instances[i], true
}

func findChange(list []Change, name string) (Change, bool) {
	i, ok := slices.BinarySearchFunc(list, name, func(ch Change, n string) int { return strings.Compare(ch.Name, n) })
	if !ok {
		return Change{}, false
	}
	return list[i], true
}

// Diff says what changed from old to new. A nil old means "nothing
// deployed yet": everything in new is Added. Order-only differences are not
// changes, and defaults count as written, exactly as in Canonical.
func Diff(old, new *Site) Changes {
	o, n := normalized(old), normalized(new)
	var c Changes
	c.Site = diffFields(flatten(siteHeader(o)), flatten(siteHeader(n)))
	c.Connections = diffNamed(o.Connections, n.Connections, func(x Connection) string { return x.Name })
	c.Targets = diffNamed(o.Targets, n.Targets, func(x Target) string { return x.Name })
	c.History = diffNamed(o.History, n.History, func(x HistoryRule) string { return x.Name })
	c.OPCUA = diffFields(flatten(o.OPCUA), flatten(n.OPCUA))
	c.Instances = diffInstances(o.Instances, n.Instances)
	return c
}

// normalized is the canonical in-memory form; a nil site is an empty one
// with no version, so a first deploy shows everything as added.
func normalized(s *Site) *Site {
	if s == nil {
		return &Site{}
	}
	c := s.Clone()
	c.ApplyDefaults()
	sortNamed(c)
	return c
}

type siteHeaderFields struct {
	Version    int    `yaml:"version"`
	Name       string `yaml:"name"`
	HotStandby bool   `yaml:"hot_standby"`
}

func siteHeader(s *Site) siteHeaderFields {
	return siteHeaderFields{Version: s.Version, Name: s.Name, HotStandby: s.HotStandby}
}

// entry flattens a named entry without its name, which its Change carries.
func entry(v any) []leaf {
	return slices.DeleteFunc(flatten(v), func(l leaf) bool { return l.path == "name" })
}

func diffNamed[T any](old, new []T, name func(T) string) []Change {
	var out []Change
	i, j := 0, 0
	for i < len(old) || j < len(new) {
		switch {
		case j == len(new) || (i < len(old) && name(old[i]) < name(new[j])):
			out = append(out, Change{Kind: Removed, Name: name(old[i]), Fields: diffFields(entry(old[i]), nil)})
			i++
		case i == len(old) || name(new[j]) < name(old[i]):
			out = append(out, Change{Kind: Added, Name: name(new[j]), Fields: diffFields(nil, entry(new[j]))})
			j++
		default:
			if f := diffFields(entry(old[i]), entry(new[j])); len(f) > 0 {
				out = append(out, Change{Kind: Changed, Name: name(new[j]), Fields: f})
			}
			i++
			j++
		}
	}
	return out
}

// instanceFields is an instance without its attributes, which are diffed
// by name on their own.
type instanceFields struct {
	Name        string `yaml:"name"`
	Connection  string `yaml:"connection"`
	Description string `yaml:"description"`
}

func diffInstances(old, new []Instance) []InstanceChange {
	var out []InstanceChange
	own := func(in Instance) instanceFields {
		return instanceFields{Name: in.Name, Connection: in.Connection, Description: in.Description}
	}
	attrName := func(a Attribute) string { return a.Name }
	i, j := 0, 0
	for i < len(old) || j < len(new) {
		switch {
		case j == len(new) || (i < len(old) && old[i].Name < new[j].Name):
			out = append(out, InstanceChange{
				Change:     Change{Kind: Removed, Name: old[i].Name, Fields: diffFields(entry(own(old[i])), nil)},
				Attributes: diffNamed(old[i].Attributes, nil, attrName),
			})
			i++
		case i == len(old) || new[j].Name < old[i].Name:
			out = append(out, InstanceChange{
				Change:     Change{Kind: Added, Name: new[j].Name, Fields: diffFields(nil, entry(own(new[j])))},
				Attributes: diffNamed(nil, new[j].Attributes, attrName),
			})
			j++
		default:
			f := diffFields(entry(own(old[i])), entry(own(new[j])))
			a := diffNamed(old[i].Attributes, new[j].Attributes, attrName)
			if len(f) > 0 || len(a) > 0 {
				out = append(out, InstanceChange{Change: Change{Kind: Changed, Name: new[j].Name, Fields: f}, Attributes: a})
			}
			i++
			j++
		}
	}
	return out
}

type leaf struct {
	path  string
	value string
}

// flatten renders every leaf field of v under its dotted YAML path, in
// field order. Empty optional values are left out so that an added entry
// lists only what it sets.
func flatten(v any) []leaf {
	var out []leaf
	flattenValue(reflect.ValueOf(v), "", &out)
	return out
}

var durationType = reflect.TypeOf(time.Duration(0))

func flattenValue(v reflect.Value, path string, out *[]leaf) {
	if v.Type() == durationType {
		*out = append(*out, leaf{path, time.Duration(v.Int()).String()})
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			flattenValue(v.Elem(), path, out)
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			tag := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
			if tag == "" || tag == "-" {
				continue
			}
			flattenValue(v.Field(i), field(path, tag), out)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			flattenValue(v.Index(i), at(path, i), out)
		}
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			// Map values are only target headers, which carry secrets.
			*out = append(*out, leaf{field(path, k.String()), redact(v.MapIndex(k).String())})
		}
	case reflect.String:
		if v.String() != "" {
			*out = append(*out, leaf{path, strconv.Quote(v.String())})
		}
	case reflect.Bool:
		*out = append(*out, leaf{path, strconv.FormatBool(v.Bool())})
	case reflect.Int, reflect.Int64, reflect.Int32:
		*out = append(*out, leaf{path, strconv.FormatInt(v.Int(), 10)})
	case reflect.Float64, reflect.Float32:
		*out = append(*out, leaf{path, strconv.FormatFloat(v.Float(), 'g', -1, 64)})
	default:
		*out = append(*out, leaf{path, fmt.Sprint(v.Interface())})
	}
}

func redact(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return "(redacted sha256:" + hex.EncodeToString(sum[:4]) + ")"
}

// diffFields pairs leaves by path; a path only on one side is an added or
// removed field.
func diffFields(old, new []leaf) []FieldChange {
	oldBy := make(map[string]string, len(old))
	for _, l := range old {
		oldBy[l.path] = l.value
	}
	newBy := make(map[string]string, len(new))
	for _, l := range new {
		newBy[l.path] = l.value
	}
	var out []FieldChange
	for _, l := range old {
		if nv, ok := newBy[l.path]; !ok || nv != l.value {
			out = append(out, FieldChange{Field: l.path, Old: l.value, New: nv})
		}
	}
	for _, l := range new {
		if _, ok := oldBy[l.path]; !ok {
			out = append(out, FieldChange{Field: l.path, New: l.value})
		}
	}
	return out
}

// String renders the changes as text for `scadactl deploy diff`: one line
// per entry marked +, - or ~, its fields indented beneath.
func (c Changes) String() string {
	if c.Empty() {
		return "no changes\n"
	}
	var b strings.Builder
	writeFields(&b, "~ site", c.Site, "    ")
	for _, ch := range c.Connections {
		writeChange(&b, "connection", ch, "")
	}
	for _, ic := range c.Instances {
		writeChange(&b, "instance", ic.Change, "")
		for _, a := range ic.Attributes {
			if ic.Kind != Changed {
				fmt.Fprintf(&b, "    %s attribute %s\n", a.Kind.sign(), a.Name)
				continue
			}
			writeChange(&b, "attribute", a, "    ")
		}
	}
	for _, ch := range c.Targets {
		writeChange(&b, "target", ch, "")
	}
	for _, ch := range c.History {
		writeChange(&b, "history", ch, "")
	}
	writeFields(&b, "~ opcua", c.OPCUA, "    ")
	return b.String()
}

func writeChange(b *strings.Builder, what string, ch Change, indent string) {
	fmt.Fprintf(b, "%s%s %s %s\n", indent, ch.Kind.sign(), what, ch.Name)
	for _, f := range ch.Fields {
		writeField(b, f, indent+"    ")
	}
}

func writeFields(b *strings.Builder, header string, fields []FieldChange, indent string) {
	if len(fields) == 0 {
		return
	}
	b.WriteString(header + "\n")
	for _, f := range fields {
		writeField(b, f, indent)
	}
}

func writeField(b *strings.Builder, f FieldChange, indent string) {
	switch {
	case f.Old == "":
		fmt.Fprintf(b, "%s+ %s: %s\n", indent, f.Field, f.New)
	case f.New == "":
		fmt.Fprintf(b, "%s- %s: %s\n", indent, f.Field, f.Old)
	default:
		fmt.Fprintf(b, "%s%s: %s -> %s\n", indent, f.Field, f.Old, f.New)
	}
}
