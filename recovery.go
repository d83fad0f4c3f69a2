package idem

import (
	"maps"
)

// State holds the small values, such as ids, that later phases of an
// operation need: a phase sets them, and they are saved on the key row
// with the recovery point that follows it, in the phase's transaction.
// Keep it to ids and short strings; request bodies belong in business rows.
// Names that start with "idem." are the library's: [Phases] keeps the
// creation of the key's row under "idem.claim_created" (see [DeriveKey]),
// which phases never see.
type State map[string]string

// Clone returns a copy of s, nil for an empty s.
func (s State) Clone() State {
	if len(s) == 0 {
		return nil
	}
	return maps.Clone(s)
}
