package rabbitnode

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the node die when the process that started it does.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
