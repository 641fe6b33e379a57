//go:build unix

package testcluster

import (
	"errors"
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

// RaceEnv names the environment variable that, set to anything, has Build
// compile the commands with the race detector; a race a process finds is
// then in its log (Node.RaceReport).
const RaceEnv = "SCADAD_TEST_RACE"

// Build compiles the commands into a new temporary folder; Remove deletes
// it. With RaceEnv set they are built with -race.
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
		args := []string{"build", "-o", *t.out}
		if os.Getenv(RaceEnv) != "" {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, t.pkg)...)
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

// BuildScadadAt compiles cmd/scadad as it was at commit of the git
// repository that holds dir (an earlier release, for mixed-version
// tests) into a new temporary folder, from `git archive` of that commit
// (no work tree of the repository changes). It returns the binary's path
// and a function that removes the folder. ErrCommitAbsent says the
// repository does not hold the commit (a shallow clone).
func BuildScadadAt(dir, commit string) (string, func(), error) {
	if out, err := exec.Command("git", "-C", dir, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("%w: %s in %s: %v %s", ErrCommitAbsent, commit, dir, err, out)
	}
	tmp, err := os.MkdirTemp("", "scadad-release-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(tmp) }
	src := filepath.Join(tmp, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		cleanup()
		return "", nil, err
	}
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", dir, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("git archive %s: %v\n%s", commit, err, out)
	}
	out := filepath.Join(tmp, "scadad")
	build := exec.Command("go", "build", "-o", out, "./cmd/scadad")
	build.Dir = src
	if b, err := build.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("build scadad at %s: %v\n%s", commit, err, b)
	}
	return out, cleanup, nil
}

// ErrCommitAbsent is returned by BuildScadadAt for a commit the
// repository does not have.
var ErrCommitAbsent = errors.New("commit not in the repository")
