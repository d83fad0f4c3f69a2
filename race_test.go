//go:build race

package idem

// raceDetector is whether the tests run under the race detector, under
// which allocation counts differ: it allocates for its own bookkeeping,
// and sync.Pool drops some of what it is given.
const raceDetector = true
