//go:build !linux

package rabbittest

import "os/exec"

// dieWithParent does nothing where the kernel has no parent-death signal:
// the test kills its nodes when it ends.
func dieWithParent(*exec.Cmd) {}
