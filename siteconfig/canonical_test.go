package siteconfig

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func mustParse(t testing.TB, yamlText string) *Site {
	t.Helper()
	s, err := Parse([]byte(yamlText))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return s
}

func mustCanonical(t testing.TB, s *Site) []byte {
	t.Helper()
	b, err := Canonical(s)
	if err != nil {
		t.Fatalf("canonical: %v", err)
	}
	return b
}

// spelledOut is minimalYAML written differently: defaults spelled out,
// comments, flow style, other key order, quoting, entries reordered.
const spelledOut = `# the same site, written by someone else
opcua:
  identities: {anonymous: true}
  security: [{mode: None, policy: None}]
  namespace_uri: "urn:mini"
  endpoint: opc.tcp://0.0.0.0:4840
  max_sessions: 100
instances:
  - attributes:
      - {name: Speed, type: double, tag: "Pump1.Speed", writable: false}
    connection: gw
    name: Pump1
connections:
  - kind: mxaccess
    name: gw
    mxaccess:
      endpoint: 'gw.local:5001'
      command_timeout: 60000ms
      in_flight_ceiling: 1m15s
      backoff_floor: 5s
      backoff_max: 1m
      prefer_bulk_supervisory: true
name: mini
version: 1
hot_standby: false
`

func TestCanonicalIgnoresSpelling(t *testing.T) {
	a := mustCanonical(t, mustParse(t, minimalYAML))
	b := mustCanonical(t, mustParse(t, spelledOut))
	if !bytes.Equal(a, b) {
		t.Fatalf("same meaning, different canonical form:\n%s\n---\n%s", a, b)
	}
}

func TestCanonicalIgnoresOrderOfNamedEntries(t *testing.T) {
	s := Generate(6, 8)
	want := mustCanonical(t, s)
	r := s.Clone()
	reverse := func(n int, swap func(i, j int)) {
		for i, j := 0, n-1; i < j; i, j = i+1, j-1 {
			swap(i, j)
		}
	}
	reverse(len(r.Instances), func(i, j int) { r.Instances[i], r.Instances[j] = r.Instances[j], r.Instances[i] })
	for k := range r.Instances {
		a := r.Instances[k].Attributes
		reverse(len(a), func(i, j int) { a[i], a[j] = a[j], a[i] })
	}
	reverse(len(r.Connections), func(i, j int) { r.Connections[i], r.Connections[j] = r.Connections[j], r.Connections[i] })
	reverse(len(r.Targets), func(i, j int) { r.Targets[i], r.Targets[j] = r.Targets[j], r.Targets[i] })
	if got := mustCanonical(t, r); !bytes.Equal(got, want) {
		t.Fatal("reordering named entries changed the canonical form")
	}
	// Canonical must not sort the caller's site in place.
	if r.Instances[0].Name == s.Instances[0].Name {
		t.Fatal("test did not reorder anything")
	}
}

func TestCanonicalKeepsSecurityPreferenceOrder(t *testing.T) {
	s := validSite()
	s.OPCUA.Security = []SecurityPair{{"Basic256Sha256", "SignAndEncrypt"}, {"None", "None"}}
	r := s.Clone()
	r.OPCUA.Security[0], r.OPCUA.Security[1] = r.OPCUA.Security[1], r.OPCUA.Security[0]
	if bytes.Equal(mustCanonical(t, s), mustCanonical(t, r)) {
		t.Fatal("the security preference order was lost")
	}
}

func TestCanonicalSeesEveryChange(t *testing.T) {
	base := mustCanonical(t, validSite())
	changes := map[string]func(s *Site){
		"hot standby":     func(s *Site) { s.HotStandby = true },
		"command timeout": func(s *Site) { s.Connections[0].MxAccess.CommandTimeout++ },
		"tag":             func(s *Site) { s.Instances[0].Attributes[0].Tag += "X" },
		"writable":        func(s *Site) { s.Instances[0].Attributes[0].Writable = true },
		"header":          func(s *Site) { s.Targets[0].Headers = map[string]string{"X-A": "1"} },
		"deadband":        func(s *Site) { s.History[0].Deadband = 0.25 },
		"bulk off":        func(s *Site) { f := false; s.Connections[0].MxAccess.PreferBulkSupervisory = &f },
	}
	for name, change := range changes {
		s := validSite()
		change(s)
		if bytes.Equal(mustCanonical(t, s), base) {
			t.Errorf("%s: canonical form did not change", name)
		}
	}
}

func TestCanonicalIsDeterministicAndAFixedPoint(t *testing.T) {
	data, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*Site{
		"example":   mustParse(t, string(data)),
		"generated": Generate(4, 30),
	} {
		first := mustCanonical(t, s)
		for range 5 {
			if again := mustCanonical(t, s); !bytes.Equal(first, again) {
				t.Fatalf("%s: canonical form differs between calls", name)
			}
		}
		reparsed := mustParse(t, string(first))
		if again := mustCanonical(t, reparsed); !bytes.Equal(first, again) {
			t.Fatalf("%s: canonical form is not a fixed point:\n%s\n---\n%s", name, first, again)
		}
		if !strings.HasPrefix(string(first), "version: 1\n") {
			t.Errorf("%s: canonical form does not start with its version", name)
		}
	}
}

func TestDigestIdentifiesContent(t *testing.T) {
	a, err := Digest(mustParse(t, minimalYAML))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Digest(mustParse(t, spelledOut))
	if a != b || len(a) != 64 {
		t.Fatalf("digests %q and %q for the same content", a, b)
	}
	c, _ := Digest(mustParse(t, strings.Replace(minimalYAML, "urn:mini", "urn:other", 1)))
	if c == a {
		t.Fatal("different content, same digest")
	}
	if _, err := Digest(nil); err == nil {
		t.Fatal("digest of nil site")
	}
}

func TestCloneSharesNothing(t *testing.T) {
	s := validSite()
	s.Targets[0].Headers = map[string]string{"X-A": "1"}
	before := mustCanonical(t, s)
	c := s.Clone()
	c.Connections[0].MxAccess.Endpoint = "other:1"
	*c.Connections[0].MxAccess.PreferBulkSupervisory = false
	c.Connections[1].OPCUA.Endpoint = "opc.tcp://other"
	c.Instances[0].Attributes[0].Tag = "changed"
	c.Targets[0].Headers["X-A"] = "2"
	c.History[0].Select[0].Attributes[0] = "Running"
	c.OPCUA.Security[0].Mode = "Sign"
	if after := mustCanonical(t, s); !bytes.Equal(before, after) {
		t.Fatal("changing a clone changed the original")
	}
}

func TestGenerateSizeAndValidity(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 5 MB site")
	}
	s := Generate(50, 250)
	if err := s.Validate(); err != nil {
		t.Fatalf("generated site does not validate: %v", err)
	}
	b := mustCanonical(t, s)
	if len(b) < 4_500_000 || len(b) > 6_000_000 {
		t.Errorf("50 x 250 canonical size %d bytes, want about 5 MB", len(b))
	}
	n := 0
	for _, in := range s.Instances {
		n += len(in.Attributes)
	}
	if n != 50*250 {
		t.Errorf("%d attributes, want %d", n, 50*250)
	}
}

func BenchmarkParse5MB(b *testing.B) {
	data, err := Canonical(Generate(50, 250))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCanonical5MB(b *testing.B) {
	s := Generate(50, 250)
	for b.Loop() {
		if _, err := Canonical(s); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDiff5MB(b *testing.B) {
	old := Generate(50, 250)
	new := old.Clone()
	new.Instances[7].Attributes[3].Tag = "moved"
	for b.Loop() {
		if c := Diff(old, new); len(c.Instances) != 1 {
			b.Fatal("wrong diff")
		}
	}
}

// The piecewise encoder must write exactly what one yaml.v3 Encode of the
// whole site writes, including for awkward strings.
func TestCanonicalEncodingMatchesPlainYAML(t *testing.T) {
	s := Generate(3, 7)
	s.Instances[0].Description = "two\nlines\n  and an indented third"
	s.Instances[1].Attributes[2].Description = "  leading space\nand: a colon\n"
	s.Instances[1].Attributes[3].Units = "'quoted' # not a comment"
	s.Instances[2].Attributes = nil
	s.Instances[1].Attributes[0].Description = "tab\there, and unicode: äöü ✓"
	c := s.Clone()
	c.ApplyDefaults()
	sortNamed(c)
	var want bytes.Buffer
	enc := yaml.NewEncoder(&want)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		t.Fatal(err)
	}
	enc.Close()
	got, err := Canonical(s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("piecewise encoding differs:\n%s\n--- want\n%s", got, want.Bytes())
	}
	back, err := Decode(got)
	if err != nil {
		t.Fatal(err)
	}
	if back.Instances[0].Description != s.Instances[0].Description {
		t.Errorf("multi-line description did not survive: %q", back.Instances[0].Description)
	}
}

func BenchmarkValidate5MB(b *testing.B) {
	s := Generate(50, 250)
	for b.Loop() {
		if err := s.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

// The whole apply of a 5 MB deploy on a node with one watcher.
func BenchmarkHolderSetArtifact5MB(b *testing.B) {
	data, err := Canonical(Generate(50, 250))
	if err != nil {
		b.Fatal(err)
	}
	h := NewHolder()
	ch, stop := h.Watch()
	defer stop()
	rev := Revision(0)
	for b.Loop() {
		rev++
		if err := h.SetArtifact(data, rev); err != nil {
			b.Fatal(err)
		}
		<-ch
	}
}
