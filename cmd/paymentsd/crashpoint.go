//go:build crashpoint

package main

import (
	"context"
	"fmt"
	"os"
)

// Built only for the crash tests: PAYMENTSD_CRASH_POINT names a recovery
// point of a payment (such as charge_created). When a phase from it is
// about to run, its checkpoint has committed: paymentsd says so on stderr
// and holds the request there, for the test to SIGKILL the process at that
// point. Never build paymentsd with the tag for anything but tests.
func init() {
	point := os.Getenv("PAYMENTSD_CRASH_POINT")
	if point == "" {
		return
	}
	beforePhase = func(ctx context.Context, at string) {
		if at != point {
			return
		}
		fmt.Fprintf(os.Stderr, "paymentsd: crash point %s reached; waiting to be killed\n", at)
		<-ctx.Done()
	}
}
