//go:build unix

package netguard

import "syscall"

// DescriptorLimit is the process's soft limit on open files (0 if unknown).
func DescriptorLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return uint64(l.Cur)
}
