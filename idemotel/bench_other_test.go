//go:build !unix

package idemotel_test

import "time"

func processCPU() (time.Duration, bool) { return 0, false }
