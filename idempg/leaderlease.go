package idempg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/jackc/pgx/v5"
)

// purgeLeaseName is the leader lease row of the purge: one per key table,
// since idem_leader_leases lives in the key table's schema.
const purgeLeaseName = "purge"

// newHolder names a leader lease's holder: random, so that no two
// processes or calls share one.
func newHolder() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// takeLeaderLease takes the lease row name for holder, for
// Config.LeaderLease, without waiting for anyone; held is false when
// another holder has it and it has not expired.
func (s *Store) takeLeaderLease(ctx context.Context, name, holder string) (held bool, err error) {
	err = s.pool.QueryRow(ctx, queryTakeLeaderLease, name, holder, s.cfg.LeaderLease).Scan(&held)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case isConflict(err) || pgCode(err) == codeUniqueViolation:
		// Another instance took it in the same instant.
		return false, nil
	case err != nil:
		return false, wrapErr(ctx, "take leader lease", err)
	}
	return held, nil
}

// dropLeaderLease gives up holder's lease row name, bounded by
// cleanupTimeout.
func (s *Store) dropLeaderLease(name, holder string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if _, err := s.pool.Exec(ctx, queryDropLeaderLease, name, holder); err != nil {
		return wrapErr(ctx, "drop leader lease", err)
	}
	return nil
}

// tryLeadByRow is TryLead with Config.NoAdvisoryLocks: a lease row that a
// goroutine renews at a third of Config.LeaderLease until unlock, which
// deletes it. A holder that dies leaves it to expire.
func (s *Store) tryLeadByRow(ctx context.Context, name string) (unlock func(), held bool, err error) {
	name = "lead:" + name
	holder := newHolder()
	if held, err := s.takeLeaderLease(ctx, name, holder); err != nil || !held {
		return nil, false, err
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(s.cfg.LeaderLease / 3)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				ctx, cancel := context.WithTimeout(context.Background(), s.cfg.LeaderLease/3)
				var ok bool
				err := s.pool.QueryRow(ctx, queryRenewLeaderLease, name, holder, s.cfg.LeaderLease).Scan(&ok)
				cancel()
				if errors.Is(err, pgx.ErrNoRows) {
					s.cfg.Logger.Warn("idempg: lost a leader lease", "name", name)
					return
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			<-done
			_ = s.dropLeaderLease(name, holder)
		})
	}, true, nil
}

// rowPurgeLock holds the purge by a lease row (Config.NoAdvisoryLocks).
// Each batch first renews it, in the batch's transaction, whose row lock
// keeps any other instance from taking it until the batch commits; a
// batch that finds it gone fails with idemstore.ErrPurgeLockLost.
type rowPurgeLock struct {
	store  *Store
	holder string
	mu     sync.Mutex
	ended  bool
	from   purgeCursor
}

// lockPurgeByRow is LockPurge with Config.NoAdvisoryLocks.
func (s *Store) lockPurgeByRow(ctx context.Context) (idemstore.PurgeLock, error) {
	holder := newHolder()
	held, err := s.takeLeaderLease(ctx, purgeLeaseName, holder)
	if err != nil {
		return nil, fmt.Errorf("idempg: purge lock: %w", err)
	}
	if !held {
		return nil, fmt.Errorf("idempg: %w", idemstore.ErrPurgeLocked)
	}
	return &rowPurgeLock{store: s, holder: holder}, nil
}

// PurgeBatch implements [idemstore.PurgeLock].
func (l *rowPurgeLock) PurgeBatch(ctx context.Context, p idemstore.PurgeParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("idempg: purge: %w", err)
	}
	p = p.WithDefaults()
	ctx, cancel := context.WithTimeout(ctx, purgeBatchTimeout)
	defer cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return 0, fmt.Errorf("idempg: purge: %w", idemstore.ErrPurgeLockLost)
	}
	var n int64
	err := pgx.BeginFunc(ctx, l.store.pool, func(tx pgx.Tx) error {
		var ok bool
		err := tx.QueryRow(ctx, queryRenewLeaderLease, purgeLeaseName, l.holder, l.store.cfg.LeaderLease).Scan(&ok)
		if errors.Is(err, pgx.ErrNoRows) {
			return idemstore.ErrPurgeLockLost
		}
		if err != nil {
			return err
		}
		n, err = l.from.batch(ctx, tx, p, queryPurgeBatch)
		return err
	})
	if errors.Is(err, idemstore.ErrPurgeLockLost) {
		return 0, fmt.Errorf("idempg: purge: the purge's lease expired and another instance took it: %w", err)
	}
	if err != nil {
		return 0, wrapErr(ctx, "purge", err)
	}
	return n, nil
}

// Unlock implements [idemstore.PurgeLock]: it deletes the lease row.
func (l *rowPurgeLock) Unlock(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return nil
	}
	l.ended = true
	return l.store.dropLeaderLease(purgeLeaseName, l.holder)
}
