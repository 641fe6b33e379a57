package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The completion script bash runs completes commands, and a command's
// subcommands after it, also past global flags and their values.
func TestCompletionCompletesCommandsAndSubcommands(t *testing.T) {
	code, script, errs := scadactl(t, "", "completion", "bash")
	if code != 0 || errs != "" {
		t.Fatalf("scadactl completion bash: exit %d, stderr %q", code, errs)
	}
	if code, _, errs := scadactl(t, "", "completion", "fish"); code != exitUsage || errs == "" {
		t.Errorf("scadactl completion fish: exit %d, stderr %q; want a usage error", code, errs)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to run the script")
	}
	file := filepath.Join(t.TempDir(), "scadactl.bash")
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words string // the command line, the last word being completed
		want  string
	}{
		{"scadactl de", "deploy"},
		{"scadactl ", "status version members failover override snapshot deploy sf audit check certs tokens alarms opcua completion"},
		{"scadactl deploy h", "history"},
		{"scadactl --endpoints 127.0.0.1:7201 -o json sf r", "retry"},
		{"scadactl members ", "list add remove"},
		{"scadactl opcua t", "trust"},
		{"scadactl status ", ""},
		{"scadactl deploy push ", ""},
	} {
		words := strings.Split(tc.words, " ")
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, "'"+w+"'")
		}
		prog := "source " + file + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" +
			strconv.Itoa(len(words)-1) + "\n_scadactl\necho \"${COMPREPLY[*]}\"\n"
		out, err := exec.Command(bash, "--norc", "--noprofile", "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: bash: %v\n%s", tc.words, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("completing %q: %q, want %q", tc.words, got, tc.want)
		}
	}
}
