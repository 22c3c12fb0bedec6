package integration

import (
	"os/exec"
	"syscall"
)

// dieWithTest makes cmd's process get SIGKILL when the test binary's
// thread that started it exits: a test that panics (go test -timeout) runs
// no cleanup, and a replica left running keeps writing client quotas to
// the shared broker and leases to NATS.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
