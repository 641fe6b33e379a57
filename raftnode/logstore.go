package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/migrate"
	"github.com/hashicorp/raft-wal/segment"
	"go.etcd.io/bbolt"

	"github.com/scadad/scadad/internal/atomicfile"
)

// LogStore names where the raft log and stable store live.
type LogStore string

const (
	// LogStoreBoltDB is raft-boltdb/v2: DataDir/raft.db, one bbolt write
	// transaction (data pages, then the meta page: two fsyncs) per append.
	LogStoreBoltDB LogStore = "boltdb"
	// LogStoreWAL is hashicorp/raft-wal: append-only segment files in
	// DataDir/raft-wal, one fsync per append.
	LogStoreWAL LogStore = "wal"
	// LogStoreAuto is LogStoreWAL for a new node and LogStoreBoltDB for a
	// node whose log is already in raft.db: an upgrade then changes
	// nothing on disk, and the previous release (raft-boltdb only) can
	// still be started on the folder. Rejoin keeps the store it resolved.
	// On Windows it is always LogStoreBoltDB (newLogStore).
	LogStoreAuto LogStore = "auto"
)

// newLogStore is what LogStoreAuto picks for a node with no log yet on
// the system goos. raft-wal (v0.4.0 to v0.4.2) fsyncs its folder when it creates its
// meta database, which Windows refuses ("Access is denied",
// hashicorp/raft-wal#42): a new node there could not start. Found by
// running scadad.exe under Wine (winsvc/wine_test.go).
func newLogStore(goos string) LogStore {
	if goos == "windows" {
		return LogStoreBoltDB
	}
	return LogStoreWAL
}

// resolveAuto picks the store for LogStoreAuto from what DataDir holds.
func (n *Node) resolveAuto() (LogStore, error) {
	_, walErr := os.Stat(n.walPath())
	_, boltErr := os.Stat(n.logStorePath())
	switch {
	case walErr == nil:
		return LogStoreWAL, nil
	case !errors.Is(walErr, fs.ErrNotExist):
		return "", fmt.Errorf("raft log %s: %w", n.walPath(), walErr)
	case boltErr == nil:
		return LogStoreBoltDB, nil
	case !errors.Is(boltErr, fs.ErrNotExist):
		return "", fmt.Errorf("raft log %s: %w", n.logStorePath(), boltErr)
	}
	return newLogStore(runtime.GOOS), nil
}

const (
	walDir = "raft-wal"
	// walBuilding is where a migration builds the WAL; it becomes walDir
	// by one rename once complete, so a crash mid-way leaves raft.db in
	// charge and the next start migrates again.
	walBuilding = "raft-wal.migrating"
	// boltAfterMigration is raft.db once its log is in the WAL: kept, not
	// read, for an operator who wants to look back.
	boltAfterMigration = "raft.db.migrated-to-wal"
)

func (n *Node) walPath() string { return filepath.Join(n.cfg.DataDir, walDir) }

// walStore is a raft-wal log that closes its meta database too: raft-wal
// v0.4.0's WAL.Close leaves the bbolt file it opened for its metadata
// open and flock-ed, so the next Open of the same folder in this process
// (a restart after Rejoin, a migration) waits on the lock forever.
type walStore struct {
	*wal.WAL
	meta *metadb.BoltMetaDB
}

func openWALAt(dir string, n *Node) (*walStore, error) {
	meta := &metadb.BoltMetaDB{}
	log := n.hlog.Named("wal")
	w, err := wal.Open(dir, wal.WithLogger(log), wal.WithMetaStore(meta),
		wal.WithSegmentFiler(segment.NewFiler(dir, newSegmentFiles(log))))
	if err != nil {
		_ = meta.Close()
		return nil, err
	}
	return &walStore{WAL: w, meta: meta}, nil
}

// Close closes the log, then its meta database.
func (s *walStore) Close() error {
	return errors.Join(s.WAL.Close(), s.meta.Close())
}

// openWAL opens DataDir/raft-wal, first moving an existing raft.db's log
// and stable keys into it.
func (n *Node) openWAL() (*walStore, error) {
	dir, bolt := n.walPath(), n.logStorePath()
	_, walErr := os.Stat(dir)
	_, boltErr := os.Stat(bolt)
	switch {
	case walErr == nil && boltErr == nil:
		// A migration finished but stopped before it put raft.db aside.
		if err := os.Rename(bolt, filepath.Join(n.cfg.DataDir, boltAfterMigration)); err != nil {
			return nil, fmt.Errorf("put aside %s after its migration to %s: %w", bolt, dir, err)
		}
	case walErr != nil && boltErr == nil:
		if err := n.migrateBoltToWAL(); err != nil {
			return nil, err
		}
	case walErr != nil && !errors.Is(walErr, fs.ErrNotExist):
		return nil, fmt.Errorf("raft log %s: %w", dir, walErr)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create raft log folder %s: %w", dir, err)
	}
	w, err := openWALAt(dir, n)
	if err != nil {
		return nil, fmt.Errorf("open raft log %s (raft.log_store: wal): %w", dir, err)
	}
	return w, nil
}

// migrateBoltToWAL copies raft.db's log entries and raft's stable keys
// (term, vote) into a new WAL, then makes that WAL the log and puts raft.db
// aside.
func (n *Node) migrateBoltToWAL() error {
	bolt := n.logStorePath()
	tmp := filepath.Join(n.cfg.DataDir, walBuilding)
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("remove an unfinished raft log migration %s: %w", tmp, err)
	}
	src, err := raftboltdb.New(raftboltdb.Options{Path: bolt, BoltOptions: &bbolt.Options{Timeout: time.Second, ReadOnly: true}})
	if err != nil {
		return damagedLog(bolt, err)
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		_ = src.Close()
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	dst, err := openWALAt(tmp, n)
	if err != nil {
		_ = src.Close()
		return fmt.Errorf("create raft log %s: %w", tmp, err)
	}
	first, _ := src.FirstIndex()
	last, _ := src.LastIndex()
	ctx := context.Background()
	err = errors.Join(
		migrate.CopyLogs(ctx, dst, src, 4<<20, nil),
		migrate.CopyStable(ctx, dst, src, nil, nil, nil),
	)
	err = errors.Join(err, dst.Close(), src.Close())
	if err != nil {
		return fmt.Errorf("migrate the raft log %s to %s: %w", bolt, tmp, err)
	}
	if err := os.Rename(tmp, n.walPath()); err != nil {
		return fmt.Errorf("migrate the raft log: rename %s: %w", tmp, err)
	}
	if err := atomicfile.SyncDir(n.cfg.DataDir); err != nil {
		return fmt.Errorf("migrate the raft log: %w", err)
	}
	if err := os.Rename(bolt, filepath.Join(n.cfg.DataDir, boltAfterMigration)); err != nil {
		return fmt.Errorf("migrate the raft log: put aside %s: %w", bolt, err)
	}
	n.log.Warn().Uint64("first_index", first).Uint64("last_index", last).Str("from", bolt).Str("to", n.walPath()).
		Msg("raft log migrated from raft-boltdb to raft-wal (raft.log_store: wal); the old file is kept as " + boltAfterMigration)
	return nil
}

// refuseWALForBolt stops a boltdb node whose log is in a WAL: starting
// from raft.db (old or absent) would forget entries it acknowledged.
func (n *Node) refuseWALForBolt() error {
	if _, err := os.Stat(n.walPath()); err == nil {
		return fmt.Errorf("the raft log of this node is in %s (raft.log_store: wal); raft.log_store: boltdb would start from another log and forget acknowledged entries: set raft.log_store: wal", n.walPath())
	}
	return nil
}

var _ logStableCloser = (*walStore)(nil)
