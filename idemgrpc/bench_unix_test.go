//go:build unix

package idemgrpc_test

import (
	"syscall"
	"testing"
	"time"
)

// processCPU returns the CPU time the process has used, user and system,
// and whether it could tell.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// reportCPU reports cpu-ns/op, the process's CPU time per operation since
// start, which a machine shared with other work inflates less than the
// elapsed time.
func reportCPU(b *testing.B, start time.Duration) {
	if end, ok := processCPU(); ok {
		b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
	}
}
