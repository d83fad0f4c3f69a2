//go:build !race

package fingerprint

// raceEnabled: under the race detector sync.Pool drops some of what it is
// given, so that a scratch is allocated again.
const raceEnabled = false
