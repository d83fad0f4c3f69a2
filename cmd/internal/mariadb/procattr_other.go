//go:build !linux

package mariadb

import "syscall"

// procAttr is nil here: the throwaway server is for Linux test machines.
func procAttr() *syscall.SysProcAttr { return nil }
