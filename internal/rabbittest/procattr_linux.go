package rabbittest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the node die when the test process does.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
