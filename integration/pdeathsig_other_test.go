//go:build !linux

package integration

import "os/exec"

// dieWithTest does nothing where the kernel has no parent-death signal.
func dieWithTest(*exec.Cmd) {}
