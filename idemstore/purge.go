package idemstore

import (
	"context"
	"errors"
	"time"
)

// PurgeStore is a store that a idem.Purger can run on. Stores that keep keys
// in a database shared by several processes make sure that one instance at
// a time holds the lock; the idempg, idemsqlite and idemtest stores
// implement it.
type PurgeStore interface {
	// LockPurge takes the purge lock without waiting. It returns an error
	// wrapping ErrPurgeLocked when another instance holds it. The lock
	// ends with PurgeLock.Unlock or when this process dies, so that
	// another instance can take over.
	LockPurge(ctx context.Context) (PurgeLock, error)
}

// PurgeLock is the purge lock, held by this instance.
type PurgeLock interface {
	// PurgeBatch deletes at most p.BatchSize keys created before
	// p.Before, and returns how many it deleted. It never deletes a key in
	// flight: a started key only goes once its lease was taken before
	// p.Before, which is long expired since retention is longer than the
	// lease, and rows that a request holds locked are skipped, never
	// waited for. It fails with an error wrapping ErrPurgeLockLost, having
	// deleted nothing, when the lock was lost.
	PurgeBatch(ctx context.Context, p PurgeParams) (int64, error)

	// Unlock gives the lock up. The lock must not be used after.
	Unlock(ctx context.Context) error
}

// KeyStats are counts of a store's started keys at one time, for
// dashboards and alerts on stuck keys.
type KeyStats struct {
	// Started is the number of keys started and not completed: in flight,
	// or left by a holder that died.
	Started int64
	// Stuck is the number of started keys whose lease expired: their
	// holder died or overran, and the client's next retry takes them over.
	Stuck int64
	// OldestStarted is when the oldest started key was claimed (its lease
	// taken); zero when there is none.
	OldestStarted time.Time
}

// KeyStatsStore is a store that counts its started keys. A idem.Purger on
// such a store reads the counts after each run, on the instance that
// holds the purge lock, and reports them when its Metrics implements
// KeyStatsMetrics.
type KeyStatsStore interface {
	// KeyStats counts the started keys; a lease taken before now minus
	// lockTimeout has expired.
	KeyStats(ctx context.Context, now time.Time, lockTimeout time.Duration) (KeyStats, error)
}

// PurgeBatchSizeDefault is the default of [PurgeParams.BatchSize], for
// the service's purger and a one-off purge alike: fewer, larger batches
// delete faster for the same effect on the requests that run meanwhile
// (docs/benchmarks.md, "Purge").
const PurgeBatchSizeDefault = 5000

var errPurgeNoBefore = errors.New("idem: PurgeParams.Before is required")

// PurgeParams are the inputs of a store's Purge, which deletes keys past
// retention, in batches.
type PurgeParams struct {
	// Before deletes keys created before this time, on the middleware's
	// clock: now minus the published retention. Required.
	Before time.Time

	// BatchSize is the number of keys deleted per statement. 0 means
	// PurgeBatchSizeDefault (5000); a negative size is an error.
	BatchSize int
}

// WithDefaults returns p with a zero BatchSize replaced by
// PurgeBatchSizeDefault.
func (p PurgeParams) WithDefaults() PurgeParams {
	if p.BatchSize == 0 {
		p.BatchSize = PurgeBatchSizeDefault
	}
	return p
}

// Errors of [PurgeParams.Validate].
var (
	errPurgeNegativeBatch = errors.New("idem: PurgeParams.BatchSize must not be negative")
)
