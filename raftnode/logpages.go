package raftnode

import (
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

// releasingLogStore counts the entry bytes that pass through raft-boltdb's
// memory map (appends rewrite the previous entry's leaf, reads fault the
// entry in) and, every `every` bytes, calls release on the log file in a
// goroutine of its own, so raft's loops never wait for it.
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

func (s *releasingLogStore) count(n int) {
	if s.moved.Add(int64(n)) < s.every || !s.running.CompareAndSwap(false, true) {
		return
	}
	s.moved.Store(0)
	go func() {
		defer s.running.Store(false)
		err := s.release(s.path)
		switch {
		case err != nil && !s.failed.Load():
			s.log.Warn().Err(err).Msg("cannot release the raft log's mapped pages; the resident size will include them")
		case err == nil && s.failed.Load():
			s.log.Info().Msg("releasing the raft log's mapped pages again")
		}
		s.failed.Store(err != nil)
	}()
}
