//go:build !race

package race

// Enabled is whether the race detector is on.
const Enabled = false
