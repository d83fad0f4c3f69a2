//go:build !linux

package chaos

import (
	"errors"
	"os"
	"syscall"
)

// The harness needs Linux (Run says so before starting anything); these
// let the package build elsewhere.

func dieWithParent() *syscall.SysProcAttr { return nil }

func stopProcess(*os.Process) error     { return errors.New("chaos: pausing a process needs Linux") }
func continueProcess(*os.Process) error { return errors.New("chaos: pausing a process needs Linux") }
