package raftnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

// snapshotStore is raft's file snapshot store made to leave no partial
// snapshot behind. raft's FileSnapshotSink keeps its "<id>.tmp" folder when
// finishing it fails (Cancel returns early when the final flush fails, and
// Close keeps it when writing the metadata fails), and the store ignores
// such folders at start: on a full disk every retried snapshot leaked one,
// and they kept the space after the disk had room again.
type snapshotStore struct {
	*raft.FileSnapshotStore
	dir string // the folder the store writes snapshots in
	log zerolog.Logger
}

// openSnapshotStore opens the store in parent/snapshots, keeping retain
// snapshots, after removing the partial ones a crash left there. Raft must
// not be running on the store.
func openSnapshotStore(parent string, retain int, hlog *hclogAdapter, log zerolog.Logger) (*snapshotStore, error) {
	s := &snapshotStore{dir: filepath.Join(parent, "snapshots"), log: log}
	if err := s.removePartial(); err != nil {
		return nil, err
	}
	if err := s.checkMetas(); err != nil {
		return nil, err
	}
	fs, err := raft.NewFileSnapshotStoreWithLogger(parent, retain, hlog.Named("snapshots"))
	if err != nil {
		return nil, fmt.Errorf("open snapshot store in %s: %w", parent, err)
	}
	s.FileSnapshotStore = fs
	return s, nil
}

// folders lists the snapshot store's folders (none before the first
// snapshot).
func (s *snapshotStore) folders() ([]os.DirEntry, error) {
	entries, err := os.ReadDir(s.dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list snapshots in %s: %w", s.dir, err)
	}
	folders := entries[:0]
	for _, e := range entries {
		if e.IsDir() {
			folders = append(folders, e)
		}
	}
	return folders, nil
}

// removePartial deletes the snapshot folders still named "<id>.tmp".
func (s *snapshotStore) removePartial() error {
	folders, err := s.folders()
	if err != nil {
		return err
	}
	for _, e := range folders {
		if !strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		path := filepath.Join(s.dir, e.Name())
		if err := os.RemoveAll(path); err != nil {
			return fmt.Errorf("remove partial snapshot %s: %w", path, err)
		}
		s.log.Warn().Str("snapshot", e.Name()).Msg("removed a partial snapshot left by a crash or a failed write")
	}
	return nil
}

// ErrDamagedSnapshot is returned for a snapshot whose metadata cannot be
// read. raft's store would skip it without a word and then, its log
// compacted up to that snapshot, panic looking for entries it no longer has.
var ErrDamagedSnapshot = errors.New("raft snapshot is damaged")

// checkMetas reads every snapshot's meta.json as raft will.
func (s *snapshotStore) checkMetas() error {
	folders, err := s.folders()
	if err != nil {
		return err
	}
	for _, e := range folders {
		path := filepath.Join(s.dir, e.Name(), "meta.json")
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("%w: read %s: %v", ErrDamagedSnapshot, path, err)
		}
		var meta raft.SnapshotMeta
		if err := json.Unmarshal(data, &meta); err != nil {
			return fmt.Errorf("%w: %s is not valid snapshot metadata: %v", ErrDamagedSnapshot, path, err)
		}
		if meta.ID != e.Name() || meta.Index == 0 {
			return fmt.Errorf("%w: %s names snapshot %q at index %d, not the snapshot of its folder", ErrDamagedSnapshot, path, meta.ID, meta.Index)
		}
	}
	return nil
}

// Create implements raft.SnapshotStore.
func (s *snapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &cleanSink{SnapshotSink: sink, tmp: filepath.Join(s.dir, sink.ID()+".tmp"), log: s.log}, nil
}

// cleanSink removes its partial folder whenever the snapshot does not end
// in place.
type cleanSink struct {
	raft.SnapshotSink
	tmp string
	log zerolog.Logger
}

func (c *cleanSink) Close() error {
	err := c.SnapshotSink.Close()
	if err != nil {
		c.removeTmp(err)
	}
	return err
}

func (c *cleanSink) Cancel() error {
	err := c.SnapshotSink.Cancel()
	c.removeTmp(err)
	return err
}

func (c *cleanSink) removeTmp(cause error) {
	if _, err := os.Stat(c.tmp); err != nil {
		return // moved into place or already removed
	}
	if err := os.RemoveAll(c.tmp); err != nil {
		c.log.Error().Err(err).Str("path", c.tmp).Msg("cannot remove a failed snapshot's folder")
		return
	}
	c.log.Warn().AnErr("cause", cause).Str("path", c.tmp).Msg("removed a failed snapshot's folder")
}
