//go:build race

package proxy

// raceEnabled: the race detector roughly doubles allocations.
const raceEnabled = true
