//go:build unix && !linux

package testcluster

import "os/exec"

// dieWithParent does nothing where the kernel has no parent-death signal.
func dieWithParent(*exec.Cmd) {}
