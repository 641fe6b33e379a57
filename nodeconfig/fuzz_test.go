package nodeconfig

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzParse: a node config file never makes Parse panic, and a config it
// accepts, written back as YAML, parses to the same config (defaults are
// applied once and stay put).
// Run: go test ./nodeconfig -run '^$' -fuzz FuzzParse -fuzztime 30s
func FuzzParse(f *testing.F) {
	f.Add([]byte(valid))
	shipped, _ := filepath.Glob("../configs/*.yaml")
	for _, path := range shipped {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("node_id: a\ncluster: {members: [{id: a}]}\n"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			_ = err.Error()
			return
		}
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("marshal an accepted config: %v", err)
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("an accepted config written back is refused: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(c, back) {
			t.Fatalf("an accepted config written back means something else:\n%+v\n%+v", c, back)
		}
	})
}
