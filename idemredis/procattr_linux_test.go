package idemredis_test

import (
	"os/exec"
	"syscall"
)

// dieWithTest has the kernel kill cmd when the test binary dies, as when
// it is killed before its cleanups run, so no server outlives it.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
