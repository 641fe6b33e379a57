package heal

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMarkerRoundTripAndPrepareStart(t *testing.T) {
	tests := []struct {
		name        string
		phase       string
		wantFenced  bool
		wantWiped   bool
		wantMarker  bool
		corruptBody string
		wantErr     bool
	}{
		{"no marker", "", false, false, false, "", false},
		{"fenced resumes fenced", PhaseFenced, true, false, true, "", false},
		{"handed over wipes", PhaseHandedOver, false, true, false, "", false},
		{"corrupt marker is an error", "", false, false, true, "{not json", true},
		{"unknown phase is an error", "", false, false, true, `{"phase":"later"}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fsmPath, raftDir := filepath.Join(dir, "fsm.db"), filepath.Join(dir, "raft")
			if err := os.WriteFile(fsmPath, []byte("state"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(raftDir, "snapshots"), 0o700); err != nil {
				t.Fatal(err)
			}
			want := Marker{MergeID: "m1", Winner: "node-a", Phase: tc.phase, Started: time.Unix(10, 0).UTC(), LoserEpoch: 3, OverrideIndex: 42}
			switch {
			case tc.corruptBody != "":
				if err := os.WriteFile(MarkerPath(dir), []byte(tc.corruptBody), 0o600); err != nil {
					t.Fatal(err)
				}
			case tc.phase != "":
				if err := SaveMarker(dir, want); err != nil {
					t.Fatal(err)
				}
				got, ok, err := LoadMarker(dir)
				if err != nil || !ok || got != want {
					t.Fatalf("load: %+v %v %v, want %+v", got, ok, err, want)
				}
			}
			fenced, err := PrepareStart(dir, fsmPath, raftDir)
			if (err != nil) != tc.wantErr || fenced != tc.wantFenced {
				t.Fatalf("PrepareStart: fenced=%v err=%v", fenced, err)
			}
			_, fsmErr := os.Stat(fsmPath)
			_, raftErr := os.Stat(raftDir)
			if wiped := os.IsNotExist(fsmErr) && os.IsNotExist(raftErr); wiped != tc.wantWiped {
				t.Fatalf("wiped=%v (fsm %v, raft %v), want %v", wiped, fsmErr, raftErr, tc.wantWiped)
			}
			if _, err := os.Stat(MarkerPath(dir)); (err == nil) != tc.wantMarker {
				t.Fatalf("marker present=%v, want %v", err == nil, tc.wantMarker)
			}
		})
	}
}

// A marker that cannot be read says so (a read error, which may pass),
// while one read but not a marker is ErrMarkerCorrupt, for the operator.
func TestLoadMarkerTellsCorruptFromUnreadable(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(MarkerPath(dir), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadMarker(dir); !errors.Is(err, ErrMarkerCorrupt) {
		t.Fatalf("a corrupt marker: %v, want ErrMarkerCorrupt", err)
	}
	// A directory where the marker should be: reading fails (EISDIR),
	// as it does with EMFILE; the content is not known to be bad.
	dir = t.TempDir()
	if err := os.Mkdir(MarkerPath(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	_, _, err := LoadMarker(dir)
	if err == nil || errors.Is(err, ErrMarkerCorrupt) || !strings.Contains(err.Error(), "read heal marker") {
		t.Fatalf("an unreadable marker: %v, want a read error that is not ErrMarkerCorrupt", err)
	}
}
