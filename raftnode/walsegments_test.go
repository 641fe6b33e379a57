package raftnode

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// A new segment is zeroed ahead of the log's writes, and never where the
// log wrote: the file starts as 0xff bytes so every zero written shows.
func TestSegmentZeroedOnlyAheadOfTheLog(t *testing.T) {
	const size = 3*zeroAhead + 100
	f, err := os.Create(filepath.Join(t.TempDir(), "seg"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(bytes.Repeat([]byte{0xff}, size)); err != nil {
		t.Fatal(err)
	}
	z := &zeroedSegment{WritableFile: f, name: "seg", size: size, log: hclog.NewNullLogger(), zeros: make([]byte, zeroAhead)}
	want := bytes.Repeat([]byte{0xff}, size)
	write := func(off int, p []byte) {
		t.Helper()
		if n, err := z.WriteAt(p, int64(off)); err != nil || n != len(p) {
			t.Fatalf("write %d bytes at %d: %d, %v", len(p), off, n, err)
		}
		copy(want[off:], p)
	}
	check := func(step string) {
		t.Helper()
		got, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if i := firstDifference(got, want); i >= 0 {
			t.Fatalf("%s: byte %d is %#x, want %#x", step, i, got[i], want[i])
		}
	}
	zeroes := func(from, to int) { clear(want[from:to]) }

	write(0, []byte("header"))
	zeroes(6, 6+zeroAhead)
	check("the first write")

	write(6, bytes.Repeat([]byte("a"), 1000))
	check("a write inside the zeros") // zeroes nothing more

	// A write that crosses the end of the zeros: zeros follow it.
	end := zeroAhead + 500
	write(1006, bytes.Repeat([]byte("b"), end-1006))
	zeroes(end, end+zeroAhead)
	check("a write past the zeros")

	// Rewriting earlier bytes (raft clearing a log suffix) zeroes nothing.
	write(10, []byte("rewritten"))
	check("a rewrite below the end")

	// Near the end of the segment the zeros stop at its size.
	write(end+zeroAhead+10, []byte("c"))
	zeroes(end+zeroAhead+11, size)
	check("a write near the segment's end")
}

func firstDifference(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

type countingFile struct {
	types.WritableFile
	syncs int
}

func (c *countingFile) Sync() error { c.syncs++; return nil }

// The first Sync of a new segment is raft-wal's own (it syncs the file
// and its directory entry); the later ones are data syncs.
func TestSegmentSyncsFullyOnceThenData(t *testing.T) {
	inner := &countingFile{}
	var dataSyncs int
	z := &zeroedSegment{WritableFile: inner, fd: 7, firstSync: true, dataSync: func(fd uintptr) error {
		if fd != 7 {
			t.Errorf("data sync of descriptor %d, want 7", fd)
		}
		dataSyncs++
		return nil
	}}
	for range 3 {
		if err := z.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if inner.syncs != 1 || dataSyncs != 2 {
		t.Errorf("full syncs %d, data syncs %d; want 1 and 2", inner.syncs, dataSyncs)
	}
	z.dataSync = nil // a system without fdatasync
	if err := z.Sync(); err != nil {
		t.Fatal(err)
	}
	if inner.syncs != 2 {
		t.Errorf("full syncs %d without fdatasync, want 2", inner.syncs)
	}
}

// A log written through segmentFiles, across many segments, reads back
// entry for entry with raft-wal's own file system, and goes on appending
// after a reopen with segmentFiles: the zeros ahead never cover an entry.
func TestLogOnZeroedSegmentsReadsBackWithRaftWALsOwnFiles(t *testing.T) {
	dir := t.TempDir()
	open := func(vfs types.VFS) (*wal.WAL, *metadb.BoltMetaDB) {
		t.Helper()
		meta := &metadb.BoltMetaDB{}
		var w *wal.WAL
		var err error
		if vfs == nil {
			w, err = wal.Open(dir, wal.WithMetaStore(meta), wal.WithSegmentSize(64<<10))
		} else {
			w, err = wal.Open(dir, wal.WithMetaStore(meta), wal.WithSegmentSize(64<<10),
				wal.WithSegmentFiler(segment.NewFiler(dir, vfs)))
		}
		if err != nil {
			t.Fatal(err)
		}
		return w, meta
	}
	closeAll := func(w *wal.WAL, meta *metadb.BoltMetaDB) {
		t.Helper()
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := meta.Close(); err != nil {
			t.Fatal(err)
		}
	}
	entry := func(i uint64) *raft.Log {
		return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("entry %d %s", i, bytes.Repeat([]byte{byte(i)}, int(i%700))))}
	}
	store := func(w *wal.WAL, from, to uint64) {
		t.Helper()
		for i := from; i <= to; i += 10 {
			var batch []*raft.Log
			for j := i; j < i+10 && j <= to; j++ {
				batch = append(batch, entry(j))
			}
			if err := w.StoreLogs(batch); err != nil {
				t.Fatalf("store %d..: %v", i, err)
			}
		}
	}
	verify := func(w *wal.WAL, last uint64, how string) {
		t.Helper()
		for i := uint64(1); i <= last; i++ {
			var got raft.Log
			if err := w.GetLog(i, &got); err != nil {
				t.Fatalf("%s: entry %d: %v", how, i, err)
			}
			if !bytes.Equal(got.Data, entry(i).Data) {
				t.Fatalf("%s: entry %d reads %q", how, i, got.Data)
			}
		}
	}

	files := newSegmentFiles(hclog.NewNullLogger())
	w, meta := open(files)
	store(w, 1, 600) // about 250 KiB: several segments
	closeAll(w, meta)
	segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	if len(segs) < 3 {
		t.Fatalf("%d segments, want several", len(segs))
	}

	w, meta = open(nil)
	verify(w, 600, "raft-wal's own files")
	closeAll(w, meta)

	w, meta = open(files)
	store(w, 601, 900)
	verify(w, 900, "reopened on zeroed segments")
	closeAll(w, meta)
}
