// Package race tells whether the binary was built with the race detector,
// for the tests that count allocations or time, which the detector
// changes: it makes sync.Pool drop some of what it is given, roughly
// doubles allocations, and slows some code (SQLite's pure-Go engine about
// fourteenfold).
package race
