package idemstore

import (
	"context"
	"maps"
	"time"
)

// RecoveryStarted is the recovery point of a key that no phase has
// passed yet: nothing of the operation has committed.
const RecoveryStarted = "started"

// Recovery is how far a phased operation under a key has come: its last
// committed recovery point and the state saved with it.
type Recovery struct {
	Point string // RecoveryStarted for a key that no phase has passed
	// State holds the small values, such as ids, that later phases need
	// (idem's State), saved with the point.
	State map[string]string
}

// RecoveryLease is a two-phase lease whose store keeps recovery points on
// the key row (idempg, idemsqlite and idemtest's memory store). idem.Phases
// needs it; [Lease] itself is unchanged, so stores without recovery points
// keep working with everything else.
type RecoveryLease interface {
	Lease

	// Recovery returns the key's last committed recovery point and state:
	// RecoveryStarted and no state for a new key, where a previous holder
	// stopped for a key this lease took over. It returns an error wrapping
	// [ErrLeaseLost] when another request has taken the key over.
	Recovery(ctx context.Context) (Recovery, error)

	// Checkpoint commits the writes made so far in the lease's transaction
	// (the one its Context carries) together with the key's new recovery
	// point and state, in one transaction that commits only if the lease
	// still holds the key; the lease then goes on with a new transaction.
	// It returns an error wrapping [ErrLeaseLost] when another request took
	// the key over, in which case the writes were rolled back, one wrapping
	// [ErrOutcomeUnknown] when the commit's answer was lost, and one
	// wrapping [ErrNoRecovery] for a lease that cannot keep a recovery point
	// (an atomic one). The lease stays held after an error: the caller
	// still calls Complete or Release.
	Checkpoint(ctx context.Context, r Recovery) error
}

// RecoveryStore is a store that can list the keys that need a resumer:
// started keys that have passed a recovery point and whose holder is gone,
// and, of the operations [UnfinishedParams.Started] names, those that
// passed none.
type RecoveryStore interface {
	Store
	// Unfinished returns up to p.Limit such keys, oldest first.
	Unfinished(ctx context.Context, p UnfinishedParams) ([]*Record, error)
}

// UnfinishedParams are the inputs of [RecoveryStore.Unfinished].
type UnfinishedParams struct {
	// Now is the time of the listing, on the middleware's clock.
	Now time.Time
	// LockTimeout is the lease length: a key locked at or before Now minus
	// LockTimeout has no live holder. A key released by its holder, which
	// keeps its recovery point, has none either.
	LockTimeout time.Duration
	// Retention is how long keys live: keys past it are left to the purge.
	// 0 means keys never expire.
	Retention time.Duration
	// Limit is the most keys returned; 0 (or less) returns none, as SQL's
	// LIMIT 0 does. The resumer passes its batch size.
	Limit int
	// Started names operations, "METHOD /path" as the middleware stores
	// them, whose keys are listed even at RecoveryStarted (no phase has
	// committed) once their lease expired: for an operation that runs by
	// idem.Phases such a key holds no durable effect, and its holder is gone.
	// Defaults to none: only keys past a recovery point are listed.
	Started []string
	// StartedAfter bounds that listing to keys created after it, so that
	// it reads a range of recent keys rather than every key within
	// retention (no index holds started keys alone). Defaults to zero: no
	// bound but retention.
	StartedAfter time.Time
	// CreatedUntil bounds the whole listing, past a recovery point or not,
	// to keys created at or before it: with Retention as its lower bound,
	// the resumer lists a span of older keys through it, a bounded range
	// per pass. Defaults to zero: no bound.
	CreatedUntil time.Time
}

// The recovery points every phased operation has. The others are the
// application's own names, such as "payment_created".
const (
	// RecoveryFinished is returned by the final phase: the operation has
	// its answer, which is stored with the key's completion.
	RecoveryFinished = "finished"
)

// Clone returns a copy of r whose State shares nothing with r's: nil when
// r's is empty. Stores hand out and keep clones, so that a phase that
// changes its state changes no recovery point.
func (r Recovery) Clone() Recovery {
	if len(r.State) == 0 {
		r.State = nil
	} else {
		r.State = maps.Clone(r.State)
	}
	return r
}

// Leader is implemented by stores that several instances share (idempg):
// TryLead takes the database-wide lock name without waiting. held is
// false when another instance holds it; otherwise unlock frees it.
type Leader interface {
	TryLead(ctx context.Context, name string) (unlock func(), held bool, err error)
}
