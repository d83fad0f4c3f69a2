//go:build !linux

package bench

import "time"

func processCPU() time.Duration { return 0 }

func serverCPU() map[int]time.Duration { return nil }
