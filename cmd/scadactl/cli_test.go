package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/version"
)

// scadactl runs scadactl in-process against an address nothing listens on,
// with stdin as given.
func scadactl(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errs strings.Builder
	code = run(context.Background(), append([]string{"--endpoints", "127.0.0.1:1", "--timeout", "300ms"}, args...), strings.NewReader(stdin), &out, &errs)
	return code, out.String(), errs.String()
}

// Each subcommand's help lists its own flags only, on stdout (help asked
// for is the answer, not an error), and exits 0.
func TestSubcommandHelpListsItsOwnFlagsOnStdout(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		want, omit string
	}{
		{[]string{"deploy", "history", "-h"}, "--target", "--expect-revision"},
		{[]string{"deploy", "status", "-h"}, "--target", "-m "},
		{[]string{"deploy", "push", "-h"}, "  -m ", "--to"},
		{[]string{"deploy", "rollback", "-h"}, "--to", "--expect-revision"},
		{[]string{"certs", "issue", "-h"}, "--name", "--nodes"},
		{[]string{"certs", "init", "-h"}, "--nodes", "--san"},
		{[]string{"opcua", "client-cert", "-h"}, "--uri", "--security-policy"},
		{[]string{"opcua", "pick", "-h"}, "--security-policy", "--uri"},
		{[]string{"snapshot", "inspect", "-h"}, "flags:", "--local"},
		{[]string{"snapshot", "save", "-h"}, "--local", "--nonvoter"},
		{[]string{"members", "list", "-h"}, "flags:", "--nonvoter"},
		{[]string{"members", "add", "-h"}, "--nonvoter", "--force"},
	} {
		code, out, errs := scadactl(t, "", tc.args...)
		_, flags, _ := strings.Cut(out, "flags:")
		if code != 0 || !strings.Contains(out, tc.want) || strings.Contains(flags, tc.omit) || errs != "" {
			t.Errorf("scadactl %s: exit %d, stdout %q, stderr %q; want exit 0, %q on stdout and not %q", strings.Join(tc.args, " "), code, out, errs, tc.want, tc.omit)
		}
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"deploy", "-h"}, {"sf", "list", "-h"}} {
		code, out, errs := scadactl(t, "", args...)
		if code != 0 || out == "" || errs != "" {
			t.Errorf("scadactl %s: exit %d, stdout %q, stderr %q; want the help on stdout", strings.Join(args, " "), code, out, errs)
		}
	}
	// A usage mistake is still an error, on stderr.
	if code, out, errs := scadactl(t, "", "deploy"); code != 2 || out != "" || errs == "" {
		t.Errorf("scadactl deploy: exit %d, stdout %q, stderr %q; want exit 2 and the usage on stderr", code, out, errs)
	}
}

// -o and -w (etcdctl's --write-out) are --output's short forms, before or
// after the command, and commands that write files answer in JSON too.
func TestOutputShortFormsAndJSONEverywhere(t *testing.T) {
	dir := t.TempDir()
	for i, flag := range []string{"-o", "-w", "--output"} {
		d := filepath.Join(dir, flag)
		code, out, errs := scadactl(t, "", "certs", "init", "--dir", d, "--nodes", "a,b", flag, "json")
		var v map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
			t.Fatalf("certs init %s json (%d): exit %d, stdout %q, stderr %q; want JSON", flag, i, code, out, errs)
		}
		code, out, errs = scadactl(t, "", flag, "json", "certs", "issue", "--dir", d, "--name", "c")
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
			t.Fatalf("%s json certs issue: exit %d, stdout %q, stderr %q; want JSON", flag, code, out, errs)
		}
	}
	// The live watch streams one JSON object per line until interrupted
	// (here: a server that never answers, so every line is a failed pick).
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var watchOut, watchErr strings.Builder
	if code := run(ctx, []string{"-o", "json", "opcua", "watch", "opc.tcp://127.0.0.1:1", "ns=2;s=X"}, strings.NewReader(""), &watchOut, &watchErr); code != 0 {
		t.Errorf("opcua watch -o json: exit %d, %q", code, watchErr.String())
	}
	lines := strings.Split(strings.TrimSpace(watchOut.String()), "\n")
	for _, line := range lines {
		var e struct{ Kind, Error string }
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Kind != "pick_failed" || e.Error == "" {
			t.Errorf("opcua watch -o json line %q: %v; want a pick_failed object", line, err)
		}
	}
	code, out, errs := scadactl(t, "", "-o", "json", "opcua", "client-cert", "--uri", "urn:x", "--dir", dir, "--name", "hmi")
	var v map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("opcua client-cert -o json: exit %d, stdout %q, stderr %q; want JSON", code, out, errs)
	}
}

// certs init --overwrite replaces the site CA, which cuts every issued
// certificate off the site: it asks first, and --yes answers.
func TestCertsInitOverwriteAsks(t *testing.T) {
	dir := t.TempDir()
	if code, _, errs := scadactl(t, "", "certs", "init", "--dir", dir, "--nodes", "a"); code != 0 {
		t.Fatalf("certs init: exit %d: %s", code, errs)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	code, _, errs := scadactl(t, "n\n", "certs", "init", "--dir", dir, "--nodes", "a", "--overwrite")
	if code != 4 || !strings.Contains(errs, "not confirmed") {
		t.Fatalf("certs init --overwrite answered no: exit %d, stderr %q; want exit 4, not confirmed", code, errs)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); string(now) != string(ca) {
		t.Fatal("the CA was replaced without confirmation")
	}
	if code, _, errs := scadactl(t, "", "certs", "init", "--dir", dir, "--nodes", "a", "--overwrite", "--yes"); code != 0 {
		t.Fatalf("certs init --overwrite --yes: exit %d: %s", code, errs)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); string(now) == string(ca) {
		t.Fatal("--overwrite --yes kept the old CA")
	}
}

// members remove asks before any node is asked; no answer is a refusal.
func TestMembersRemoveAsks(t *testing.T) {
	code, _, errs := scadactl(t, "", "members", "remove", "node-b")
	if code != 4 || !strings.Contains(errs, "not confirmed") || !strings.Contains(errs, "node-b") {
		t.Fatalf("members remove without an answer: exit %d, stderr %q; want exit 4 naming node-b, not confirmed", code, errs)
	}
}

// A list with nothing in it is an empty JSON list, not null: sf list,
// members list, audit and sf stats print their slices as they come.
func TestEmptyListsPrintAsEmptyJSON(t *testing.T) {
	var out strings.Builder
	g := &globals{output: "json", stdout: &out}
	var none []*controlpb.SFMessage
	if err := g.printOut(none, func(*tabwriter.Writer) {}); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != "[]" {
		t.Fatalf("an empty list printed %q, want []", got)
	}
}

// JSON has no numbers for NaN and ±Inf: a watched Double that reads NaN
// must not end the stream with an encoding error.
func TestWatchJSONValueCarriesNonFinite(t *testing.T) {
	for in, want := range map[float64]string{math.NaN(): `"NaN"`, math.Inf(1): `"+Inf"`, math.Inf(-1): `"-Inf"`, 1.5: `1.5`} {
		b, err := json.Marshal(jsonValue(in))
		if err != nil || string(b) != want {
			t.Errorf("%v: %s, %v; want %s", in, b, err, want)
		}
	}
	if b, _ := json.Marshal(jsonValue(float32(math.Inf(1)))); string(b) != `"+Inf"` {
		t.Errorf("float32 +Inf: %s", b)
	}
}

// `scadactl version` says scadactl's own version even when no node can be
// asked (no certificates, or none reachable), and still fails for that.
func TestVersionPrintsTheClientWithoutACluster(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"version", "-o", "json"}} {
		code, out, errs := scadactl(t, "", args...)
		if code == 0 || !strings.Contains(out, version.Get().Version) || errs == "" {
			t.Errorf("scadactl %s: exit %d, stdout %q, stderr %q; want scadactl's version on stdout, the error on stderr and a failure",
				strings.Join(args, " "), code, out, errs)
		}
	}
}

// `scadactl help` and `scadactl help CMD [SUB]` print what -h prints
// (stdout, exit 0); help for a command that does not exist names it and
// is a usage error.
func TestHelpCommandPrintsTheHelpOfDashH(t *testing.T) {
	for _, tc := range []struct{ help, dashH []string }{
		{[]string{"help"}, []string{"-h"}},
		{[]string{"help", "deploy"}, []string{"deploy", "-h"}},
		{[]string{"help", "status"}, []string{"status", "-h"}},
		{[]string{"help", "deploy", "push"}, []string{"deploy", "push", "-h"}},
		{[]string{"-o", "json", "help", "sf"}, []string{"sf", "-h"}},
	} {
		code, out, errs := scadactl(t, "", tc.help...)
		_, want, _ := scadactl(t, "", tc.dashH...)
		if code != 0 || out != want || errs != "" {
			t.Errorf("scadactl %s: exit %d, stdout %q, stderr %q; want exit 0 and what scadactl %s prints: %q",
				strings.Join(tc.help, " "), code, out, errs, strings.Join(tc.dashH, " "), want)
		}
	}
	code, out, errs := scadactl(t, "", "help", "frobnicate")
	if code != 2 || out != "" || !strings.Contains(errs, `"frobnicate"`) {
		t.Errorf("scadactl help frobnicate: exit %d, stdout %q, stderr %q; want exit 2 and an error naming frobnicate", code, out, errs)
	}
}
