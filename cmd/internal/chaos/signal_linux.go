package chaos

import (
	"os"
	"syscall"
)

// dieWithParent makes a child get SIGKILL when the harness dies, however
// it dies.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

func stopProcess(p *os.Process) error     { return p.Signal(syscall.SIGSTOP) }
func continueProcess(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
