//go:build !linux

package raftnode

// platformDataSync is nil where the system has no fdatasync: a segment's
// every Sync is then raft-wal's own full one.
func platformDataSync() func(fd uintptr) error { return nil }
