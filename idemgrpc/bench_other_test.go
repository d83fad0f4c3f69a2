//go:build !unix

package idemgrpc_test

import (
	"testing"
	"time"
)

func processCPU() (time.Duration, bool) { return 0, false }

func reportCPU(*testing.B, time.Duration) {}
