package idem_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem"
)

// resultCounter is a Metrics of one's own; package idemprom has the
// Prometheus one.
type resultCounter struct {
	mu     sync.Mutex
	counts map[idem.Result]int
}

func (c *resultCounter) Request(_ context.Context, r idem.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[r]++
}

func (c *resultCounter) Claim(context.Context, time.Duration, error) {}

// Results lists every value the middleware counts, so that an adapter can
// create each series at zero; the comments of the Result constants say
// what each means.
func ExampleMetrics() {
	var m idem.Metrics = &resultCounter{counts: map[idem.Result]int{}}
	for _, r := range idem.Results() {
		m.Request(context.Background(), r)
	}
	// The results worth an alert.
	fmt.Println(idem.ResultUnavailable, idem.ResultLeaseLost, idem.ResultTakenOver, idem.ResultConflictRerun)
	// The results of requests that reached the handler, or did not.
	fmt.Println(idem.ResultExecuted, idem.ResultReleased, idem.ResultReplayed, idem.ResultInFlight, idem.ResultMismatch, idem.ResultRejected)
	fmt.Println(len(m.(*resultCounter).counts))
	// Output:
	// unavailable lease_lost taken_over conflict_rerun
	// executed released replayed in_flight mismatch rejected
	// 11
}
