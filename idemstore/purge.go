package idemstore

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/idemkit/idem/internal/pause"
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
// the service's purger and a one-off purge alike, on a store that does not
// name a size of its own ([PurgePacer]): fewer, larger batches delete
// faster for the same effect on the requests that run meanwhile
// (docs/benchmarks.md, "Purge").
const PurgeBatchSizeDefault = 5000

// PurgeShareDefault is the default of [PurgeParams.Share], on a store that
// does not name a share of its own ([PurgePacer]): a purge's batches hold
// the database at most a fifth of the purge's time. At 300
// requests a second and 24 hours of retention a steady purge deletes 300
// keys a second, a small part of what a fifth of the database's time
// deletes (docs/benchmarks.md, "A paced purge").
const PurgeShareDefault = 0.2

// PurgePacer is a [PurgeStore] with a pace of its own, used where none is
// configured: idemsqlite's batches are smaller than PurgeBatchSizeDefault
// and its share lower than PurgeShareDefault, since each batch holds
// SQLite's one writer, which every request that writes waits for.
type PurgePacer interface {
	// PurgeBatchSize returns the store's default batch size, in keys.
	PurgeBatchSize() int
	// PurgeShare returns the store's default share of time, from above
	// 0 to 1 (PurgePause).
	PurgeShare() float64
}

// PurgePause is the pacing of every purge (idem.Purger, the stores' Purge
// and their outboxes' PurgeEvents): after a batch that took took, the
// purge waits took × (1 − share) / share before the next, so that its
// batches hold the database at most share of its time and requests get
// the rest, however slow a batch is on a large table or a loaded machine.
// A share of 0 means PurgeShareDefault; 1 sends the batches back to back.
// A share outside [0, 1] is refused by the Validate methods that take it.
func PurgePause(took time.Duration, share float64) time.Duration {
	if share == 0 {
		share = PurgeShareDefault
	}
	if took <= 0 || share >= 1 {
		return 0
	}
	return time.Duration(math.Round(float64(took) * (1 - share) / share))
}

// PurgeWait waits PurgePause(took, share) after a batch, or until ctx is
// done, and then returns ctx's error.
func PurgeWait(ctx context.Context, took time.Duration, share float64) error {
	return pause.For(ctx, PurgePause(took, share))
}

// ValidPurgeShare reports whether share is a share of time a purge can
// take: from 0 (the default) to 1.
func ValidPurgeShare(share float64) bool {
	return share >= 0 && share <= 1
}

var errPurgeNoBefore = errors.New("idem: PurgeParams.Before is required")

// PurgeParams are the inputs of a store's Purge, which deletes keys past
// retention, in batches.
type PurgeParams struct {
	// Before deletes keys created before this time, on the middleware's
	// clock: now minus the published retention. Required.
	Before time.Time

	// BatchSize is the number of keys deleted per statement. 0 means the
	// store's default: PurgeBatchSizeDefault (5000), or its
	// PurgePacer's; a negative size is an error.
	BatchSize int

	// Share is the most of its time that a purge of several batches (a
	// store's Purge) spends in its batches: after each, it pauses
	// PurgePause of the batch's duration. 0 means the store's default:
	// PurgeShareDefault (0.2), or its PurgePacer's; 1 sends the batches
	// back to back; outside [0, 1] is an error.
	// One batch (PurgeLock.PurgeBatch) does not read it.
	Share float64
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
	errPurgeShare         = errors.New("idem: PurgeParams.Share must be from 0 to 1")
)
