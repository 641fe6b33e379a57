package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestSystemdUnitHardened checks the shipped unit with systemd-analyze:
// it verifies, and its exposure score is at most 2.0 (it was 8.8
// EXPOSED). Skipped where systemd-analyze is not installed.
func TestSystemdUnitHardened(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	unit, err := os.ReadFile(filepath.Join("..", "..", "packaging", "scadad.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Type=notify", "WatchdogSec=", "NoNewPrivileges=true", "ProtectSystem=strict", "CapabilityBoundingSet=CAP_NET_BIND_SERVICE", "ReadWritePaths=/var/lib/scadad"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("unit lacks %s", want)
		}
	}
	// verify needs the ExecStart binary to exist.
	dir := t.TempDir()
	path := filepath.Join(dir, "scadad.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/scadad", "/bin/true")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sa, "verify", path).CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err := exec.Command(sa, "security", "--offline=true", path).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for scadad.service: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	score, _ := strconv.ParseFloat(string(m[1]), 64)
	if score > 2.0 {
		t.Fatalf("exposure %.1f, want at most 2.0:\n%s", score, out)
	}
	t.Logf("systemd-analyze security: %.1f", score)
}
