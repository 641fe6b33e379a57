//go:build windows

package winsvc

import (
	"errors"
	"os"
	"slices"
	"testing"
)

// TestSCMStoresTheRecoveryActions registers a real service through SCM
// and reads its recovery actions back from the control manager. It needs
// Administrator and changes the machine's services, so it runs only with
// SCADAD_WINDOWS_SCM_TEST=1. Under Wine 8 it fails: Wine's control manager
// takes the actions without an error but answers "Invalid level" when
// they are read back (docs/operations.md#windows).
func TestSCMStoresTheRecoveryActions(t *testing.T) {
	if os.Getenv("SCADAD_WINDOWS_SCM_TEST") != "1" {
		t.Skip("registers a real Windows service: set SCADAD_WINDOWS_SCM_TEST=1 and run as Administrator")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec, err := NewSpec(exe, `C:\ProgramData\scadad-recovery-test\node.yaml`)
	if err != nil {
		t.Fatal(err)
	}
	spec.Name = "scadad-recovery-test"
	created := (SCM{}).Create(spec)
	if created != nil && !errors.Is(created, ErrNonCrashRecoveryRefused) {
		t.Fatal(created)
	}
	t.Cleanup(func() {
		if err := (SCM{}).Delete(spec.Name); err != nil {
			t.Errorf("delete the test service: %v", err)
		}
	})
	if created != nil {
		t.Errorf("create: %v", created)
	}
	got, err := (SCM{}).Recovery(spec.Name)
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	if !slices.Equal(got.Restarts, spec.Recovery) || got.ResetAfter != spec.ResetAfter || !got.OnNonZeroExit {
		t.Errorf("the control manager stored %+v, want restarts %v, reset after %v, on a non-zero exit too", got, spec.Recovery, spec.ResetAfter)
	}
}
