//go:build !linux

package idemamqp_test

import "os/exec"

// dieWithParent does nothing where the kernel has no parent-death signal:
// the test kills its children when it ends.
func dieWithParent(*exec.Cmd) {}
