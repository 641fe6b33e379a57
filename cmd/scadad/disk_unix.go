//go:build unix

package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// diskSpace is what the file system holding dir has free for an
// unprivileged writer, and its size.
func diskSpace(dir string) (free, size uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	bsize := uint64(st.Bsize)
	return st.Bavail * bsize, st.Blocks * bsize, nil
}
