package raftnode

import (
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

// releasingLogStore counts the entry bytes that pass through raft-boltdb's
// memory map (appends rewrite the previous entry's leaf, reads fault the
// entry in) and, every `every` bytes, calls release on the log file in a
// goroutine of its own, so raft's loops never wait for it. Compactions
// release as they go (see DeleteRange).
type releasingLogStore struct {
	raft.LogStore
	path    string
	release func(path string) error
	every   int64
	log     zerolog.Logger

	moved   atomic.Int64 // bytes since the last release started
	running atomic.Bool
	failed  atomic.Bool
}

func (s *releasingLogStore) GetLog(index uint64, l *raft.Log) error {
	err := s.LogStore.GetLog(index, l)
	if err == nil {
		s.count(len(l.Data))
	}
	return err
}

func (s *releasingLogStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

func (s *releasingLogStore) StoreLogs(logs []*raft.Log) error {
	err := s.LogStore.StoreLogs(logs)
	if err == nil {
		n := 0
		for _, l := range logs {
			n += len(l.Data)
		}
		s.count(2 * n)
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
func (s *releasingLogStore) DeleteRange(first, last uint64) error {
	for lo := first; lo <= last; lo += deleteChunk {
		hi := last
		if last-lo >= deleteChunk {
			hi = lo + deleteChunk - 1
		}
		if err := s.LogStore.DeleteRange(lo, hi); err != nil {
			return err
		}
		s.report(s.release(s.path))
		if hi == last {
			break
		}
	}
	s.moved.Store(0)
	return nil
}

func (s *releasingLogStore) report(err error) {
	switch {
	case err != nil && !s.failed.Load():
		s.log.Warn().Err(err).Msg("cannot release the raft log's mapped pages; the resident size will include them")
	case err == nil && s.failed.Load():
		s.log.Info().Msg("releasing the raft log's mapped pages again")
	}
	s.failed.Store(err != nil)
}

func (s *releasingLogStore) count(n int) {
	if s.moved.Add(int64(n)) < s.every || !s.running.CompareAndSwap(false, true) {
		return
	}
	s.moved.Store(0)
	go func() {
		defer s.running.Store(false)
		s.report(s.release(s.path))
	}()
}
