package mariadb

import "syscall"

// procAttr puts mariadbd in a process group of its own, and kills it
// when this process dies, so that a test never leaves a server behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
