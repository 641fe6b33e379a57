package heal

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/scadad/scadad/internal/atomicfile"
)

// MarkerFile is the loser's merge marker, in the node's data dir.
const MarkerFile = "heal-state.json"

// Phases of the loser's merge, as recorded in the marker.
const (
	// PhaseFenced: raft is (to be) stopped and the hand-over is under way.
	PhaseFenced = "fenced"
	// PhaseHandedOver: the winner holds everything; wipe and rejoin.
	PhaseHandedOver = "handed-over"
)

// Marker is the loser's persisted merge state. It is written before every
// irreversible step, so a restart resumes the merge.
type Marker struct {
	MergeID string    `json:"merge_id"`
	Winner  string    `json:"winner"`
	Phase   string    `json:"phase"`
	Started time.Time `json:"started"`
	// LoserEpoch and OverrideIndex are the loser's facts at the start: the
	// epoch the winner must exceed and where the loser's split began.
	LoserEpoch    uint64 `json:"loser_epoch"`
	OverrideIndex uint64 `json:"override_index"`
}

// MarkerPath is the marker's path in dataDir.
func MarkerPath(dataDir string) string { return filepath.Join(dataDir, MarkerFile) }

// ErrMarkerCorrupt: the marker file was read but does not hold a marker
// (an operator must fix or remove it). Any other LoadMarker error is a
// failed read (out of file descriptors, an I/O error) that may pass.
var ErrMarkerCorrupt = errors.New("heal marker corrupt")

// LoadMarker reads the marker; ok is false when there is none.
func LoadMarker(dataDir string) (m Marker, ok bool, err error) {
	data, err := os.ReadFile(MarkerPath(dataDir))
	if errors.Is(err, os.ErrNotExist) {
		return Marker{}, false, nil
	}
	if err != nil {
		return Marker{}, false, fmt.Errorf("read heal marker: %w", err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return Marker{}, false, fmt.Errorf("%w: decode %s: %w", ErrMarkerCorrupt, MarkerPath(dataDir), err)
	}
	switch m.Phase {
	case PhaseFenced, PhaseHandedOver:
	default:
		return Marker{}, false, fmt.Errorf("%w: %s: unknown phase %q", ErrMarkerCorrupt, MarkerPath(dataDir), m.Phase)
	}
	return m, true, nil
}

// SaveMarker writes the marker durably: temp file, fsync, rename, fsync of
// the directory. A crash leaves the old marker or the new one, never half.
func SaveMarker(dataDir string, m Marker) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode heal marker: %w", err)
	}
	if err := atomicfile.Write(MarkerPath(dataDir), data, 0o600); err != nil {
		return fmt.Errorf("write heal marker: %w", err)
	}
	return nil
}

// RemoveMarker deletes the marker (durably).
func RemoveMarker(dataDir string) error {
	if err := os.Remove(MarkerPath(dataDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove heal marker: %w", err)
	}
	if err := atomicfile.SyncDir(dataDir); err != nil {
		return fmt.Errorf("remove heal marker: %w", err)
	}
	return nil
}

// PrepareStart runs before the FSM and raft open. It reports whether raft
// must start fenced (a hand-over was interrupted) and, for a merge that was
// handed over but not finished, wipes the FSM file and raft dir so the node
// starts empty and is re-admitted, then removes the marker.
func PrepareStart(dataDir, fsmPath, raftDir string) (startFenced bool, err error) {
	m, ok, err := LoadMarker(dataDir)
	if err != nil || !ok {
		return false, err
	}
	switch m.Phase {
	case PhaseFenced:
		return true, nil
	case PhaseHandedOver:
		for _, p := range []string{fsmPath, raftDir} {
			if err := os.RemoveAll(p); err != nil {
				return false, fmt.Errorf("heal: wipe %s before rejoining: %w", p, err)
			}
		}
		return false, RemoveMarker(dataDir)
	}
	return false, nil
}
