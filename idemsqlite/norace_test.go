//go:build !race

package idemsqlite_test

// raceDetector is whether the tests run under the race detector, which
// slows SQLite's pure-Go engine about fourteenfold.
const raceDetector = false
