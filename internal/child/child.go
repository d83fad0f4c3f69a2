// Package child starts child processes that die with their parent.
//
// On Linux a child gets a parent-death signal from the kernel when the
// thread that started it exits, not the process. Go ends a thread whose
// goroutine exits while locked to it, so a child started from an arbitrary
// thread could get its signal in the middle of a run. [Start] therefore
// starts every child from one goroutine locked to its operating-system
// thread for the life of the process; the caller sets the signal in
// cmd.SysProcAttr.Pdeathsig.
package child

import (
	"os/exec"
	"runtime"
	"sync"
)

var spawner struct {
	once sync.Once
	reqs chan request
}

type request struct {
	cmd  *exec.Cmd
	done chan error
}

// Start starts cmd, as cmd.Start does, from the thread that starts every
// child of this process.
func Start(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan request)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawner.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawner.reqs <- request{cmd: cmd, done: done}
	return <-done
}
