package testcluster

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel SIGKILL cmd's process when the thread that
// started it exits, so a test binary or benchmark that is killed (a go test
// timeout, ^C, SIGKILL) leaves no scadad, sink or simulator running behind
// it. Go retires an OS thread only when a goroutine locked to it ends
// without unlocking, which nothing that starts these processes does.
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
