package idem

// Mode says how a store runs the handler relative to the key's transaction.
type Mode int

const (
	// ModeAtomic holds one database transaction from the claim to the stored
	// response. The handler's business writes run in it, and everything
	// commits at once or not at all: a crash never leaves a key behind. Use
	// it when all side effects of the handler are in the store's database.
	ModeAtomic Mode = iota

	// ModeTwoPhase commits the claim first, as a lease with a fencing token,
	// then runs the handler. The response is stored in the same transaction
	// as the handler's business writes, and that transaction commits only if
	// the lease is still the holder's. A key whose holder died is taken over
	// after the lock timeout. Use it when the handler calls other systems,
	// and pass those systems a key from [DeriveKey].
	ModeTwoPhase
)

// String returns "atomic" or "two-phase".
func (m Mode) String() string {
	switch m {
	case ModeAtomic:
		return "atomic"
	case ModeTwoPhase:
		return "two-phase"
	}
	return "unknown"
}
