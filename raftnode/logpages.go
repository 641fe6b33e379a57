package raftnode

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

// logStableStore is raft-boltdb's store as raftnode uses it: the log and
// the stable store in one bbolt file.
type logStableStore interface {
	raft.LogStore
	raft.StableStore
}

type logStableCloser interface {
	logStableStore
	Close() error
}

// releasingStore hands the resident pages of raft-boltdb's memory map back
// to the kernel (Config.ReleaseLogPages). bbolt moves or unmaps its map only
// inside a write transaction, and every write to the store goes through this
// wrapper under mu, so a release made under mu may unmap the pages safely.
//
// It counts the entry bytes that pass through the map (an append rewrites
// the previous entry's leaf, a read faults the entry in) and every `every`
// bytes releases in a goroutine of its own, so raft's loops do not wait for
// it; a compaction releases as it goes (see DeleteRange).
type releasingStore struct {
	logStableStore
	path    string
	release func(path string) error
	every   int64
	log     zerolog.Logger

	mu      sync.Mutex   // held by every write, every release and the close
	closed  bool         // the store is closed: its map is gone, release nothing
	moved   atomic.Int64 // bytes since the last release started
	running atomic.Bool
	failed  atomic.Bool
}

func (s *releasingStore) GetLog(index uint64, l *raft.Log) error {
	err := s.logStableStore.GetLog(index, l)
	if err == nil {
		s.count(len(l.Data))
	}
	return err
}

func (s *releasingStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

func (s *releasingStore) StoreLogs(logs []*raft.Log) error {
	s.mu.Lock()
	err := s.logStableStore.StoreLogs(logs)
	s.mu.Unlock()
	if err == nil {
		s.count(2 * dataBytes(logs))
	}
	return err
}

// deleteChunk is how many entries one transaction of a log compaction
// deletes.
const deleteChunk = 256

// DeleteRange deletes the entries in chunks, oldest first, releasing the
// pages after each: compaction after a snapshot deletes thousands of
// entries, and bbolt touches a good part of what it frees (a follower's
// raft.db went from 5 to 75 MB resident within a second, deleting 8,192
// entries of 64 KiB). Stopped halfway, it leaves the log contiguous.
func (s *releasingStore) DeleteRange(first, last uint64) error {
	for lo := first; lo <= last; lo += deleteChunk {
		hi := last
		if last-lo >= deleteChunk {
			hi = lo + deleteChunk - 1
		}
		s.mu.Lock()
		err := s.logStableStore.DeleteRange(lo, hi)
		if err == nil {
			s.releaseLocked()
		}
		s.mu.Unlock()
		if err != nil {
			return err
		}
		if hi == last {
			break
		}
	}
	s.moved.Store(0)
	return nil
}

func (s *releasingStore) Set(key, val []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logStableStore.Set(key, val)
}

func (s *releasingStore) SetUint64(key []byte, val uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logStableStore.SetUint64(key, val)
}

func (s *releasingStore) count(n int) {
	if s.moved.Add(int64(n)) < s.every || !s.running.CompareAndSwap(false, true) {
		return
	}
	s.moved.Store(0)
	go func() {
		defer s.running.Store(false)
		s.releaseNow()
	}()
}

// releaseNow releases the pages between writes.
func (s *releasingStore) releaseNow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

// closeStore closes the wrapped store with close, under s.mu: bbolt unmaps
// the file on close, and a release racing it could hit whatever is mapped
// at that address next (or, after a rejoin, the new store's map).
func (s *releasingStore) closeStore(close func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return close()
}

// releaseLocked releases the pages; the caller holds s.mu.
func (s *releasingStore) releaseLocked() {
	if s.closed {
		return
	}
	err := s.release(s.path)
	switch {
	case err != nil && !s.failed.Load():
		s.log.Warn().Err(err).Msg("cannot release the raft log's mapped pages; the resident size will include them")
	case err == nil && s.failed.Load():
		s.log.Info().Msg("releasing the raft log's mapped pages again")
	}
	s.failed.Store(err != nil)
}
