package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/winsvc"
)

// createOnlySCM records what install registers and reads it back; every
// other call fails.
type createOnlySCM struct{ created []winsvc.Spec }

func (s *createOnlySCM) Create(spec winsvc.Spec) error {
	s.created = append(s.created, spec)
	return nil
}
func (s *createOnlySCM) Delete(string) error { return errors.New("not in this test") }
func (s *createOnlySCM) Start(string) error  { return errors.New("not in this test") }
func (s *createOnlySCM) Stop(string) error   { return errors.New("not in this test") }
func (s *createOnlySCM) SetRecovery(string, winsvc.Recovery) error {
	return errors.New("not in this test")
}
func (s *createOnlySCM) Recovery(string) (winsvc.Recovery, error) {
	last := s.created[len(s.created)-1]
	return winsvc.Recovery{Restarts: last.Recovery, ResetAfter: last.ResetAfter, OnNonZeroExit: true}, nil
}
func (s *createOnlySCM) Query(string) (winsvc.Status, error) {
	return winsvc.Status{}, errors.New("not in this test")
}

func testServiceEnv(m winsvc.Manager) serviceEnv {
	return serviceEnv{
		manager: func() (winsvc.Manager, error) { return m, nil },
		exe:     func() (string, error) { return `C:\Program Files\scadad\scadad.exe`, nil },
		abs:     func(string) (string, error) { return `C:\ProgramData\scadad\node.yaml`, nil },
	}
}

func TestServiceInstallRegistersTheCheckedConfig(t *testing.T) {
	scm := &createOnlySCM{}
	var stdout, stderr bytes.Buffer
	if code := runServiceCommand([]string{"install", "--config", "../../configs/node-a.yaml"}, &stdout, &stderr, testServiceEnv(scm)); code != 0 {
		t.Fatalf("install: exit %d: %s", code, stderr.String())
	}
	if len(scm.created) != 1 {
		t.Fatalf("created %d services", len(scm.created))
	}
	spec := scm.created[0]
	if spec.Exe != `C:\Program Files\scadad\scadad.exe` || strings.Join(spec.Args, " ") != `--service --config C:\ProgramData\scadad\node.yaml` {
		t.Errorf("registered %q %q", spec.Exe, spec.Args)
	}
	if len(spec.Recovery) != 3 || spec.Recovery[0] != 5*time.Second || spec.Recovery[2] != 60*time.Second {
		t.Errorf("recovery %v", spec.Recovery)
	}
}

func TestServiceInstallRefusesAConfigTheServiceCouldNotStartWith(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(bad, []byte("node_id: node-a\nlog: {level: loud}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"install", "--config", bad}, 1, "log.level"},
		{[]string{"install"}, 1, "--config FILE is required"},
		{[]string{"start", "--config", bad}, 2, "--config is for install"},
		{[]string{"restart"}, 2, `"restart" is not install, uninstall, start, stop or recovery`},
		{[]string{"stop", "extra"}, 2, `unexpected "extra"`},
		{nil, 2, "usage: scadad service install --config FILE"},
	} {
		scm := &createOnlySCM{}
		var stdout, stderr bytes.Buffer
		code := runServiceCommand(tc.args, &stdout, &stderr, testServiceEnv(scm))
		if code != tc.code || !strings.Contains(stderr.String(), tc.says) || len(scm.created) != 0 {
			t.Errorf("%q: exit %d (want %d), created %d, stderr %q (want it to say %q)", tc.args, code, tc.code, len(scm.created), stderr.String(), tc.says)
		}
	}
}

func TestServiceCommandsOffWindowsPointAtSystemd(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the control manager is there on Windows")
	}
	var stdout, stderr bytes.Buffer
	if code := runServiceCommand([]string{"start"}, &stdout, &stderr, osServiceEnv()); code != 1 || !strings.Contains(stderr.String(), "systemctl enable --now scadad") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}
