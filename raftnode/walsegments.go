package raftnode

import (
	"fmt"

	"github.com/hashicorp/go-hclog"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/types"
)

// zeroAhead is how far beyond the end of the log's latest write a new
// segment is zeroed.
const zeroAhead = 1 << 20

// segmentFiles is raft-wal's own file system with two changes to how a new
// segment is written, so that the fsync after each append has nothing but
// the appended data to flush.
//
// raft-wal preallocates a segment with fallocate, which leaves its blocks
// unwritten: the first write into each turns it written, a change to the
// file's extent tree that ext4 must journal, so every fsync after an append
// also committed the journal, and the three nodes of a site on one disk
// queued on it. Here the segment is written with zeros in chunks ahead of the
// log (one journal commit a MiB instead of one an append), and after the
// first (full) fsync of a new segment, which also syncs its directory
// entry, each Sync is an fdatasync where the system has one: the file
// keeps its size and its blocks, so only its modification time is left
// out, which nothing reads. Measured on the 2-core machine: 5–7 % more
// enqueues a second at 64 producers (bench/results/2026-12-04-ceilings.md).
//
// A segment opened again after a restart (the tail raft-wal recovers) is
// written as raft-wal writes it: what lies beyond its valid end is not
// known, so nothing there is zeroed.
type segmentFiles struct {
	*walfs.FS
	log hclog.Logger
	// zeros is zeroAhead zero bytes, only ever read: what every segment
	// writes ahead of its appends.
	zeros []byte
	// dataSync is fdatasync on the file's descriptor (nil where the
	// system has none); injected by tests.
	dataSync func(fd uintptr) error
}

func newSegmentFiles(log hclog.Logger) segmentFiles {
	return segmentFiles{FS: walfs.New(), log: log, zeros: make([]byte, zeroAhead), dataSync: platformDataSync()}
}

// Create creates the segment as raft-wal does (preallocated, its first
// Sync also syncing the directory) and zeroes it ahead of the log's writes.
func (s segmentFiles) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := s.FS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	fd, ok := f.(interface{ Fd() uintptr })
	if !ok {
		return f, nil
	}
	return &zeroedSegment{
		WritableFile: f, name: name, fd: fd.Fd(), size: int64(size),
		firstSync: true, log: s.log, zeros: s.zeros, dataSync: s.dataSync,
	}, nil
}

// zeroedSegment is a new segment being appended to. raft-wal calls
// WriteAt and Sync from its one writer, under its own lock.
type zeroedSegment struct {
	types.WritableFile
	name     string
	fd       uintptr
	size     int64
	log      hclog.Logger
	zeros    []byte
	dataSync func(fd uintptr) error

	// zeroedTo is the end of the zeros written ahead; every write so far
	// ended at or below it.
	zeroedTo int64
	// firstSync: the next Sync is raft-wal's own full one.
	firstSync bool
}

// WriteAt writes p, then, when p ends past the zeros, zeroes up to
// zeroAhead beyond its end (within the segment's size). Zeros are only ever
// written beyond the end of every write before, so they never cover the
// log's data.
func (z *zeroedSegment) WriteAt(p []byte, off int64) (int, error) {
	n, err := z.WritableFile.WriteAt(p, off)
	if err != nil {
		return n, err
	}
	end := off + int64(n)
	if end <= z.zeroedTo {
		return n, nil
	}
	upTo := min(end+zeroAhead, z.size)
	if upTo > end {
		if zerr := z.zero(end, upTo); zerr != nil {
			// Only the speed of later appends depends on the zeros:
			// stop zeroing this segment and let them write as raft-wal
			// does.
			z.log.Warn("stopped zeroing a raft log segment ahead of its appends", "segment", z.name, "error", zerr)
			upTo = z.size
		}
	}
	z.zeroedTo = max(upTo, end)
	return n, nil
}

// zero writes zeros over [from, to), at most zeroAhead bytes: one write.
func (z *zeroedSegment) zero(from, to int64) error {
	if _, err := z.WritableFile.WriteAt(z.zeros[:to-from], from); err != nil {
		return fmt.Errorf("zero %s at %d: %w", z.name, from, err)
	}
	return nil
}

// Sync is raft-wal's full sync the first time (the new file and its
// directory entry), then an fdatasync where the system has one.
func (z *zeroedSegment) Sync() error {
	if z.firstSync || z.dataSync == nil {
		if err := z.WritableFile.Sync(); err != nil {
			return err
		}
		z.firstSync = false
		return nil
	}
	if err := z.dataSync(z.fd); err != nil {
		return fmt.Errorf("fdatasync raft log segment %s: %w", z.name, err)
	}
	return nil
}
