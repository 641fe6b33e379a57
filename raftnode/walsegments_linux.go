package raftnode

import (
	"errors"

	"golang.org/x/sys/unix"
)

// platformDataSync is fdatasync(2), retried when a signal interrupts it.
func platformDataSync() func(fd uintptr) error {
	return func(fd uintptr) error {
		for {
			err := unix.Fdatasync(int(fd))
			if !errors.Is(err, unix.EINTR) {
				return err
			}
		}
	}
}
