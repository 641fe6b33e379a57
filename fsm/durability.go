package fsm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/scadad/scadad/internal/atomicfile"
)

// ErrUnsyncedState is returned by Open when the state file was last written
// without fsync (Options.DeferSync) and the operating system has restarted
// since: writes the page cache held may never have reached the disk, so the
// file cannot be trusted. The caller discards it (DiscardState) and rebuilds
// the state from the raft snapshot and log, which are always synced.
var ErrUnsyncedState = errors.New("fsm: state file was not synced before the operating system restarted")

// unsyncedSuffix names the marker kept beside the state file while commits
// are not synced: it holds the boot id of the OS that wrote them.
const unsyncedSuffix = ".unsynced"

// DefaultBootID reads the running kernel's boot id; "" where there is none
// (non-Linux), which keeps every commit synced.
func DefaultBootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// checkUnsynced refuses a state file left unsynced by an earlier boot. A
// marker from this boot means only the process stopped (a crash or SIGKILL):
// the page cache kept every write, in order, and the file is whole.
func checkUnsynced(path, bootID string) error {
	marker, err := os.ReadFile(path + unsyncedSuffix)
	switch {
	case os.IsNotExist(err):
		return nil
	case err != nil:
		return fmt.Errorf("read %s: %w", path+unsyncedSuffix, err)
	}
	written := strings.TrimSpace(string(marker))
	if written == "" {
		// The marker's write never completed (a full disk): commits go
		// unsynced only once it is on disk, so none were made.
		return nil
	}
	if bootID != "" && written == bootID {
		return nil
	}
	return fmt.Errorf("%w: %s was written by boot %q, this is boot %q", ErrUnsyncedState, path, written, bootID)
}

// markUnsynced records, durably, that commits to path will not be synced
// from now on. It must be on disk before the first such commit.
func markUnsynced(path, bootID string) error {
	marker := path + unsyncedSuffix
	if b, err := os.ReadFile(marker); err == nil && strings.TrimSpace(string(b)) == bootID {
		return nil
	}
	f, err := os.OpenFile(marker, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", marker, err)
	}
	_, err = f.WriteString(bootID + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = atomicfile.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		// No commit has gone unsynced yet; a marker half written must not
		// make the next start distrust the state.
		_ = os.Remove(marker)
		return fmt.Errorf("write %s: %w", marker, err)
	}
	return nil
}

// clearUnsynced removes the marker once the file has been synced.
func clearUnsynced(path string) error {
	if err := os.Remove(path + unsyncedSuffix); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove %s: %w", path+unsyncedSuffix, err)
	}
	return atomicfile.SyncDir(filepath.Dir(path))
}

// DiscardState removes a state file Open refused with ErrUnsyncedState,
// and its marker, so the next Open starts empty.
func DiscardState(path string) error {
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("discard state %s: %w", path, err)
	}
	return clearUnsynced(path)
}
