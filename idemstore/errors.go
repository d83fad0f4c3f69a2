package idemstore

import (
	"errors"
	"fmt"
	"time"
)

// Errors of a claim's lease.
var (
	// ErrLeaseLost means the key was taken over by another request, or
	// completed by one, before this holder could store its response.
	ErrLeaseLost = errors.New("idem: lease lost to another request")

	// ErrLeaseEnded means the lease was already completed or released: a
	// second Complete or Release, or a use of its transaction after that.
	ErrLeaseEnded = errors.New("idem: the lease has ended")

	// ErrUnavailable means the store cannot be reached. Stores wrap
	// connection failures, timeouts and pool exhaustion with it.
	ErrUnavailable = errors.New("idem: store unavailable")

	// ErrOutcomeUnknown means a commit was sent to the store and its answer
	// never came back (the connection failed after the COMMIT went out): it
	// may have been applied or not. A Complete that returns it has left the
	// key either completed or still in flight, never free; the client must
	// retry with the same key, which gets the stored response if the commit
	// happened. Stores wrap it together with [ErrUnavailable].
	ErrOutcomeUnknown = errors.New("idem: outcome of the commit unknown")

	// ErrNoRecovery means that recovery points cannot be kept for the key:
	// the handler does not run behind the middleware, the store's leases do
	// not implement [RecoveryLease], or the mode is not idem.ModeTwoPhase.
	ErrNoRecovery = errors.New("idem: recovery points need ModeTwoPhase and a store that keeps them")
)

// CompletedError is returned, wrapped, by [Lease.Complete] when another
// request completed the key before this holder could store its response:
// the holder's writes were rolled back, and Record is the stored key. The
// middleware answers from Record as it answers a claim that found it: the
// replay, or 422 for a different request. It wraps [ErrLeaseLost], so code
// that knows only that error still sees a lost lease.
type CompletedError struct {
	Record *Record
}

// Error describes the error.
func (e *CompletedError) Error() string {
	return "idem: another request completed the key first"
}

// Unwrap returns ErrLeaseLost.
func (e *CompletedError) Unwrap() error { return ErrLeaseLost }

// ExistsError is returned, wrapped, by Complete and Release of a
// speculative lease (see [ClaimParams.Speculative]) whose claim, sent late,
// found the key held by a request in flight or completed: nothing the
// handler sent to the store ran, and Record is the key as the claim found
// it (Status [StatusInFlight] for one in flight). The middleware answers
// from Record as it answers a claim that found it: the replay, 409 or 422,
// never with the handler's own response. It wraps [ErrLeaseLost].
type ExistsError struct {
	Record *Record
}

// Error describes the error.
func (e *ExistsError) Error() string {
	if e.Record != nil && e.Record.Status == StatusCompleted {
		return "idem: the key was completed by another request"
	}
	return "idem: the key is held by another request"
}

// Unwrap returns ErrLeaseLost.
func (e *ExistsError) Unwrap() error { return ErrLeaseLost }

// Errors of [KeyReader] and [KeyAdmin].
var (
	// ErrKeyNotFound means the store holds no key for the scope.
	ErrKeyNotFound = errors.New("idem: no such key")
	// ErrKeyCompleted means a release found the key completed: freeing it
	// would let the operation run a second time.
	ErrKeyCompleted = errors.New("idem: the key is completed; releasing it would allow a second execution")
	// ErrKeyInFlight means a delete found the key started: release it.
	ErrKeyInFlight = errors.New("idem: the key is in flight; release it instead of deleting it")
	// ErrKeyChanged means the key changed between the store's read and its
	// write, as when a request took it over or completed it: look again.
	ErrKeyChanged = errors.New("idem: the key changed while it was being released")
	// ErrLeaseLive is wrapped by [LeaseLiveError].
	ErrLeaseLive = errors.New("idem: the key's lease is live")
)

// LeaseLiveError is returned by a release without Force of a key whose
// holder's lease has not expired: its holder may still be running.
type LeaseLiveError struct {
	LockedAt time.Time // when the holder claimed the key
	Expires  time.Time // when its lease expires
}

// Error describes the error.
func (e *LeaseLiveError) Error() string {
	return fmt.Sprintf("idem: the key's lease is live: claimed at %s, expires at %s", e.LockedAt.Format(time.RFC3339), e.Expires.Format(time.RFC3339))
}

// Unwrap returns ErrLeaseLive.
func (e *LeaseLiveError) Unwrap() error { return ErrLeaseLive }

// Errors of the purge lock.
var (
	// ErrPurgeLocked means another instance holds the purge lock: it is
	// the one that purges, and this one waits for its turn.
	ErrPurgeLocked = errors.New("idem: another instance holds the purge lock")
	// ErrPurgeLockLost means the purge lock was lost, as when the
	// connection that held it broke; the batch that reports it deleted
	// nothing.
	ErrPurgeLockLost = errors.New("idem: the purge lock was lost")
)

// ErrSchemaVersion is wrapped by [SchemaVersionError].
var ErrSchemaVersion = errors.New("idem: the store's schema is not at the version this build needs")

// SchemaVersionError says that a store's schema is older than this build
// needs: migrations have not been applied.
type SchemaVersionError struct {
	Have, Want int
}

// Error describes the error.
func (e *SchemaVersionError) Error() string {
	return fmt.Sprintf("idem: the store's schema is at version %d and this build needs %d: apply the migrations", e.Have, e.Want)
}

// Unwrap returns ErrSchemaVersion.
func (e *SchemaVersionError) Unwrap() error { return ErrSchemaVersion }
