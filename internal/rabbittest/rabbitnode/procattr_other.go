//go:build !linux

package rabbitnode

import "os/exec"

// dieWithParent does nothing where the kernel has no parent-death signal:
// the owner kills its nodes when it ends.
func dieWithParent(*exec.Cmd) {}
