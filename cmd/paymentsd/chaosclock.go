//go:build chaosclock

package main

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Built only for the chaos harness: PAYMENTSD_CHAOS_CLOCK_FILE names a file
// holding an offset in nanoseconds that idem's clock adds to the time, so
// that the harness can run one instance's clock ahead of the others'. The
// file is read every 50 ms. Never build paymentsd with the tag for
// anything but the harness.
func init() {
	path := os.Getenv("PAYMENTSD_CHAOS_CLOCK_FILE")
	if path == "" {
		return
	}
	var offset atomic.Int64
	read := func() {
		if b, err := os.ReadFile(path); err == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
				offset.Store(n)
			}
		}
	}
	read()
	go func() {
		for range time.Tick(50 * time.Millisecond) {
			read()
		}
	}()
	clockNow = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
}
