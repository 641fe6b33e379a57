//go:build windows

package main

import (
	"fmt"

	"golang.org/x/sys/windows"
)

// diskSpace is what the volume holding dir has free for this user, and its
// size.
func diskSpace(dir string) (free, size uint64, err error) {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("disk space of %s: %w", dir, err)
	}
	var total, totalFree uint64
	if err := windows.GetDiskFreeSpaceEx(p, &free, &total, &totalFree); err != nil {
		return 0, 0, fmt.Errorf("disk space of %s: %w", dir, err)
	}
	return free, total, nil
}
