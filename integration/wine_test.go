package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/pki"
)

// wineSite is one Wine prefix with scadad.exe and a one-node site in it.
type wineSite struct {
	t       *testing.T
	dir     string // the site folder, Z:<dir> under Wine
	exe     string
	env     []string
	events  string // what Wine's eventlog channel printed: the Event Log
	httpURL string
}

// winPath is p as Wine's Z: drive shows it.
func winPath(p string) string { return "Z:" + strings.ReplaceAll(p, "/", `\`) }

// run runs a Windows program under Wine and returns its output.
func (w *wineSite) run(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "wine", args...)
	cmd.Env = w.env
	cmd.Dir = w.dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (w *wineSite) mustRun(timeout time.Duration, args ...string) string {
	w.t.Helper()
	out, err := w.run(timeout, args...)
	if err != nil {
		w.t.Fatalf("wine %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (w *wineSite) health(path string) map[string]any {
	resp, err := http.Get(w.httpURL + path)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var v map[string]any
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&v) != nil {
		return nil
	}
	return v
}

func (w *wineSite) waitActive(what string) {
	w.t.Helper()
	testwait.ForDetail(w.t, 60*time.Second, what, func() (bool, string) {
		v := w.health("/health/active")
		return v["active"] == true, fmt.Sprint(v)
	})
}

func (w *wineSite) file(rel string) string {
	b, _ := os.ReadFile(filepath.Join(w.dir, rel))
	return string(b)
}

// newWineSite makes a Wine prefix under t's folder that runs Go 1.26
// binaries, and a site in it. Wine 8 (Debian 12) lacks
// bcryptprimitives.dll, whose ProcessPrng the Go runtime needs since Go
// 1.22 ("fatal error: bcryptprimitives.dll not found"): the prefix gets
// one that forwards ProcessPrng to advapi32's SystemFunction036
// (RtlGenRandom, the same contract: fill the buffer, TRUE), built by
// binutils-mingw-w64. It is a test shim for Wine only (WORKAROUNDS.md).
func newWineSite(t *testing.T) *wineSite {
	for _, tool := range []string{"wine", "wineserver", "x86_64-w64-mingw32-dlltool", "x86_64-w64-mingw32-ld"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (apt-get install wine64 binutils-mingw-w64-x86-64; .ci/run installs them): scadad.exe is not run under Wine", tool)
		}
	}
	root := t.TempDir()
	w := &wineSite{t: t, dir: filepath.Join(root, "site"), events: filepath.Join(root, "wine-services.log")}
	prefix := filepath.Join(root, "prefix")
	w.env = append(os.Environ(), "WINEPREFIX="+prefix, "WINEDEBUG=-all,+eventlog", "WINEDLLOVERRIDES=mscoree,mshtml=", "DISPLAY=")
	// Every Wine process of the prefix ends with the test (they are ours:
	// the prefix is this test's). Registered first, so it runs last.
	t.Cleanup(func() {
		k := exec.Command("wineserver", "-k")
		k.Env = w.env
		_ = k.Run()
	})
	// The shim DLL.
	shim := filepath.Join(root, "shim")
	if err := os.MkdirAll(shim, 0o755); err != nil {
		t.Fatal(err)
	}
	def := "LIBRARY bcryptprimitives\nEXPORTS\nProcessPrng = advapi32.SystemFunction036\n"
	if err := os.WriteFile(filepath.Join(shim, "b.def"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{
		{"x86_64-w64-mingw32-dlltool", "-d", "b.def", "-e", "b.exp"},
		{"x86_64-w64-mingw32-ld", "--shared", "-e", "0", "-o", "bcryptprimitives.dll", "b.exp"},
	} {
		cmd := exec.Command(c[0], c[1:]...)
		cmd.Dir = shim
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", c, err, out)
		}
	}
	boot := exec.Command("wine", "wineboot", "--init")
	boot.Env = w.env
	if out, err := boot.CombinedOutput(); err != nil {
		t.Fatalf("wineboot: %v\n%s", err, out)
	}
	dll, err := os.ReadFile(filepath.Join(shim, "bcryptprimitives.dll"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prefix, "drive_c", "windows", "system32", "bcryptprimitives.dll"), dll, 0o644); err != nil {
		t.Fatal(err)
	}
	// One Wine session for the whole test, held by a cmd.exe waiting on
	// its input: when the last program of a session ends, Wine ends its
	// services.exe, and the next program starts it anew, which starts
	// every automatic service by itself. The session's services.exe is
	// started by this first program and prints the Event Log records
	// (Wine's eventlog channel) to its stderr: w.events.
	ev, err := os.Create(w.events)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ev.Close() })
	keeper := exec.Command("wine", "cmd")
	keeper.Env = w.env
	stdin, err := keeper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	keeper.Stdout, keeper.Stderr = ev, ev
	if err := keeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = keeper.Process.Kill(); _ = keeper.Wait() })

	// scadad.exe, certificates and a one-node site.
	w.exe = filepath.Join(root, "scadad.exe")
	build := exec.Command("go", "build", "-o", w.exe, "./cmd/scadad")
	build.Dir = ".."
	build.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("GOOS=windows go build: %v\n%s", err, out)
	}
	if err := pki.Init(filepath.Join(w.dir, "certs"), "wine", []string{"one"}, nil, 825*24*time.Hour, pki.WithCAValidity(3650*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	ports, err := testcluster.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	w.httpURL = fmt.Sprintf("http://127.0.0.1:%d", ports[2])
	cfg := fmt.Sprintf(`node_id: one
data_dir: data
cluster:
  mode: strict
  members:
    - {id: one, raft_addr: "127.0.0.1:%d", api_addr: "127.0.0.1:%d"}
tls: {ca: certs/ca.crt, cert: certs/one.crt, key: certs/one.key}
http:
  listen: "127.0.0.1:%d"
  insecure: true
log:
  level: info
  file: {max_size_mib: 1, max_backups: 3}
`, ports[0], ports[1], ports[2])
	if err := os.WriteFile(filepath.Join(w.dir, "node.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestWindowsBinaryUnderWine runs the GOOS=windows scadad.exe under Wine:
// --version, a one-node site serving its HTTP health and writing its
// rotated log file, then as a service of Wine's service control manager
// (scadad service install/start/stop/uninstall, sc query, net start/stop)
// with its start, stop and warnings in the Event Log. What Wine cannot
// show (its control manager stores no recovery actions and does not see
// a killed service process) is in docs/operations.md.
func TestWindowsBinaryUnderWine(t *testing.T) {
	w := newWineSite(t)
	exe := winPath(w.exe)
	cfg := winPath(filepath.Join(w.dir, "node.yaml"))

	if out := w.mustRun(30*time.Second, exe, "--version"); !strings.Contains("\n"+out, "\nscadad v") {
		t.Fatalf("--version: %q", out)
	}

	// A log file at its size bound is rotated at the first line: the
	// Windows rename of lumberjack's rotation.
	logDir := filepath.Join(w.dir, "data", "log")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	full := bytes.Repeat([]byte(`{"level":"info","message":"filler line of the previous run"}`+"\n"), (1<<20)/61+1)
	if err := os.WriteFile(filepath.Join(logDir, "scadad.log"), full, 0o644); err != nil {
		t.Fatal(err)
	}

	// The service: registered by scadad itself through svc/mgr.
	out := w.mustRun(60*time.Second, exe, "service", "install", "--config", cfg)
	if !strings.Contains(out, "scadad service install: done") {
		t.Fatalf("install: %s", out)
	}
	reg := w.mustRun(30*time.Second, "reg", "query", `HKLM\System\CurrentControlSet\Services\scadad`)
	if !strings.Contains(reg, exe+" --service --config "+cfg) || !strings.Contains(reg, "Start    REG_DWORD    0x2") {
		t.Errorf("registered service:\n%s", reg)
	}
	if src := w.mustRun(30*time.Second, "reg", "query", `HKLM\System\CurrentControlSet\Services\EventLog\Application\scadad`); !strings.Contains(src, "TypesSupported") {
		t.Errorf("Event Log source not registered:\n%s", src)
	}
	if out := w.mustRun(90*time.Second, exe, "service", "start"); !strings.Contains(out, "done") {
		t.Fatalf("service start: %s", out)
	}
	if q := w.mustRun(30*time.Second, "sc", "query", "scadad"); !strings.Contains(q, "RUNNING") {
		t.Errorf("sc query after start:\n%s", q)
	}
	w.waitActive("the service serves /health/active as the Active node")

	// The log went to data_dir\log\scadad.log (no log.file.path: the
	// service has no stderr), JSON, after rotating the full one.
	testwait.ForDetail(t, 30*time.Second, "the rotated log file and the new one", func() (bool, string) {
		m, _ := filepath.Glob(filepath.Join(logDir, "scadad-*.log"))
		cur := w.file("data/log/scadad.log")
		return len(m) == 1 && strings.Contains(cur, `"message":"scadad started"`) && !strings.Contains(cur, "filler"), fmt.Sprintf("backups %v, current %d bytes", m, len(cur))
	})
	if out := w.mustRun(90*time.Second, exe, "service", "stop"); !strings.Contains(out, "done") {
		t.Fatalf("service stop: %s", out)
	}
	if q := w.mustRun(30*time.Second, "sc", "query", "scadad"); !strings.Contains(q, "STOPPED") || !strings.Contains(q, "WIN32_EXIT_CODE    : 0") {
		t.Errorf("sc query after stop:\n%s", q)
	}
	if cur := w.file("data/log/scadad.log"); !strings.Contains(cur, `"message":"stopped"`) {
		t.Errorf("the log file has no clean stop:\n%s", cur)
	}

	// Wine's own service commands drive it the same way.
	w.mustRun(90*time.Second, "net", "start", "scadad")
	w.waitActive("active again after net start")
	w.mustRun(90*time.Second, "net", "stop", "scadad")
	// Wine's net stop returns once the stop is asked for, the service
	// still STOP_PENDING (seen in CI); it must reach STOPPED.
	testwait.ForDetail(t, 30*time.Second, "STOPPED after net stop", func() (bool, string) {
		q := w.mustRun(30*time.Second, "sc", "query", "scadad")
		return strings.Contains(q, "STOPPED"), q
	})

	// The Event Log (Wine prints each record on its eventlog channel):
	// the starts with the version, the warning of the insecure listener,
	// the stops.
	events := w.file("../wine-services.log")
	for _, want := range []string{"scadad started as a service: v", `http.insecure: the HTTP listener serves plain HTTP`, "scadad stopped"} {
		if !strings.Contains(events, want) {
			t.Errorf("the Event Log has no %q:\n%s", want, events)
		}
	}
	if n := strings.Count(events, "scadad started as a service"); n != 2 {
		t.Errorf("%d start records, want 2", n)
	}

	if out := w.mustRun(90*time.Second, exe, "service", "uninstall"); !strings.Contains(out, "done") {
		t.Fatalf("uninstall: %s", out)
	}
	if q, err := w.run(30*time.Second, "sc", "query", "scadad"); err == nil && strings.Contains(q, "RUNNING") {
		t.Errorf("sc query after uninstall:\n%s", q)
	}
	if out, _ := w.run(30*time.Second, exe, "service", "start"); !strings.Contains(out, "service not installed") {
		t.Errorf("start after uninstall: %s", out)
	}
}
