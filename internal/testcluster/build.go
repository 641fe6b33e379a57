//go:build unix

package testcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
)

// Binaries are the paths of the built commands.
type Binaries struct {
	Dir                      string
	Scadad, Scadactl, Sfsink string
	MxgwSim                  string
}

// Build compiles the commands into a new temporary folder; Remove deletes it.
func Build() (*Binaries, error) {
	dir, err := os.MkdirTemp("", "scadad-bin-")
	if err != nil {
		return nil, err
	}
	b := &Binaries{Dir: dir}
	for _, t := range []struct {
		pkg string
		out *string
	}{
		{"github.com/scadad/scadad/cmd/scadad", &b.Scadad},
		{"github.com/scadad/scadad/cmd/scadactl", &b.Scadactl},
		{"github.com/scadad/scadad/cmd/sfsink", &b.Sfsink},
		{"github.com/scadad/scadad/cmd/mxgw-sim", &b.MxgwSim},
	} {
		*t.out = filepath.Join(dir, filepath.Base(t.pkg))
		cmd := exec.Command("go", "build", "-o", *t.out, t.pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("build %s: %v\n%s", t.pkg, err, out)
		}
	}
	return b, nil
}

// Remove deletes the binaries.
func (b *Binaries) Remove() { os.RemoveAll(b.Dir) }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
