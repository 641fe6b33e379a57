package fsm

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// Empty leaves a state with nothing applied and nothing in it, and no
// scratch file behind.
func TestEmptyResetsTheState(t *testing.T) {
	f := openTestFSM(t)
	w := newLogWriter(t)
	mustOK(t, f, w.cmd(revoke("1f", "alice")))
	if f.Meta().AppliedIndex == 0 || !f.Access().IsRevoked("1f") {
		t.Fatal("the command was not applied")
	}
	scratch := t.TempDir()
	if err := f.Empty(context.Background(), scratch); err != nil {
		t.Fatal(err)
	}
	if got := f.Meta().AppliedIndex; got != 0 {
		t.Errorf("applied index %d after Empty, want 0", got)
	}
	if f.Access().IsRevoked("1f") {
		t.Error("the revocation survived Empty")
	}
	if _, err := os.Stat(filepath.Join(scratch, "heal-empty.db")); !os.IsNotExist(err) {
		t.Errorf("scratch state left behind: %v", err)
	}
}
