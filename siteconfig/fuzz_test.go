package siteconfig

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: decoding, validating and canonicalising never panic, and the
// canonical form is a fixed point that means the same site. Seeds are the
// example config, testdata/*.yaml and the YAML of the other tests; run
// with `go test -fuzz FuzzParse ./siteconfig`.
func FuzzParse(f *testing.F) {
	seeds := []string{exampleFile}
	more, _ := filepath.Glob("testdata/*.yaml")
	for _, path := range append(seeds, more...) {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatalf("seed %s: %v", path, err)
		}
		f.Add(data)
	}
	f.Add([]byte(minimalYAML))
	f.Add([]byte(spelledOut))
	f.Add([]byte("version: 1\n"))
	f.Add([]byte("version: 1\nconnections: {"))
	f.Add([]byte("version: 1\n---\nversion: 1\n"))

	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := Parse(data); err != nil {
			_ = err.Error()
		}
		s, err := Decode(data)
		if err != nil {
			return
		}
		verdict := s.Validate()
		_ = Diff(nil, s).String()
		first, err := Canonical(s)
		if err != nil {
			t.Fatalf("canonical of a decoded site: %v", err)
		}
		back, err := Decode(first)
		if err != nil {
			t.Fatalf("canonical form does not decode: %v\n%s", err, first)
		}
		second, err := Canonical(back)
		if err != nil {
			t.Fatalf("canonical of the canonical form: %v", err)
		}
		if !bytes.Equal(first, second) {
			t.Fatalf("canonical form is not a fixed point:\n%s\n---\n%s", first, second)
		}
		if (verdict == nil) != (back.Validate() == nil) {
			t.Fatalf("validity changed through the canonical form: %v vs %v", verdict, back.Validate())
		}
		if c := Diff(s, back); !c.Empty() {
			t.Fatalf("the canonical form means something else:\n%s", c)
		}
	})
}
