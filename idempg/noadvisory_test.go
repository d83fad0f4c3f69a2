package idempg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/pgtest"
)

// TestConformanceWithoutAdvisoryLocks runs the whole conformance suite
// with Config.NoAdvisoryLocks, as a role refused every advisory lock
// function, at the server's default isolation and at SERIALIZABLE.
func TestConformanceWithoutAdvisoryLocks(t *testing.T) {
	t.Parallel()
	connString := pgtest.NoAdvisoryDatabase(t)
	admin := newPool(t, connString, 2)
	for _, tt := range []struct {
		name string
		cfg  idempg.Config
	}{
		{"ReadCommitted", idempg.Config{NoAdvisoryLocks: true}},
		{"Serializable", idempg.Config{NoAdvisoryLocks: true, IsoLevel: pgx.Serializable}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			idemtest.RunStoreTests(t, idemtest.Harness{
				NewStore: func(t *testing.T) idemstore.Store {
					return setupOn(t, schemaPool(t, admin, connString), &tt.cfg)
				},
				Write: func(ctx context.Context, _ idemstore.Store, value string) error {
					return write(ctx, value)
				},
				Count: func(t *testing.T, s idemstore.Store, value string) int {
					return countRows(t, s.(*idempg.Store), value)
				},
				NewUnmigrated: func(t *testing.T) idemstore.Store {
					cfg := tt.cfg
					cfg.Logger = quiet
					store, err := idempg.New(schemaPool(t, admin, connString), &cfg)
					if err != nil {
						t.Fatalf("New: %v", err)
					}
					return store
				},
			})
		})
	}
}

// TestStormWithoutAdvisoryLocks is the storm of
// TestMiddlewareStormRunsEachKeyOnce on three instances, each a store on a
// pool of its own, with Config.NoAdvisoryLocks, as a role refused every
// advisory lock function: each key runs once, and its duplicates get its
// response or 409 "in flight".
func TestStormWithoutAdvisoryLocks(t *testing.T) {
	t.Parallel()
	connString := pgtest.NoAdvisoryDatabase(t)
	cfg := &idempg.Config{NoAdvisoryLocks: true, AcquireTimeout: testTimeout}
	stores := make([]*idempg.Store, 3)
	for i := range stores {
		pool := newPool(t, connString, 10)
		if i == 0 {
			stores[i] = setupOn(t, pool, cfg)
			continue
		}
		c := *cfg
		c.Logger = quiet
		store, err := idempg.New(pool, &c)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		stores[i] = store
	}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			created, replayed, inFlight := storm(t, stores, mode)
			t.Logf("%s: %d created, %d replayed, %d in flight (409)", mode, created, replayed, inFlight)
		})
	}
}

// TestLeaderLeaseWithoutAdvisoryLocks: with Config.NoAdvisoryLocks, one
// instance at a time leads by its lease row; unlock frees it at once, and
// a holder that never renews loses it once Config.LeaderLease passed.
func TestLeaderLeaseWithoutAdvisoryLocks(t *testing.T) {
	t.Parallel()
	connString := pgtest.NoAdvisoryDatabase(t)
	cfg := &idempg.Config{NoAdvisoryLocks: true, LeaderLease: time.Second}
	a := setupOn(t, newPool(t, connString, 4), cfg)
	c := *cfg
	c.Logger = quiet
	b, err := idempg.New(newPool(t, connString, 4), &c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	unlock, held, err := a.TryLead(ctx, "resumer")
	if err != nil || !held {
		t.Fatalf("first TryLead = %v, %v; want held", held, err)
	}
	if _, held, err := b.TryLead(ctx, "resumer"); err != nil || held {
		t.Fatalf("second TryLead while the first leads = %v, %v; want not held", held, err)
	}
	if _, held, err := b.TryLead(ctx, "other"); err != nil || !held {
		t.Fatalf("TryLead of another name = %v, %v; want held", held, err)
	}
	unlock()
	unlockB, held, err := b.TryLead(ctx, "resumer")
	if err != nil || !held {
		t.Fatalf("TryLead after unlock = %v, %v; want held", held, err)
	}
	unlockB()

	// A purge lock whose holder died: its row stays until it expires.
	lock, err := a.LockPurge(ctx)
	if err != nil {
		t.Fatalf("LockPurge: %v", err)
	}
	if _, err := b.LockPurge(ctx); !errors.Is(err, idemstore.ErrPurgeLocked) {
		t.Fatalf("second LockPurge = %v; want ErrPurgeLocked", err)
	}
	if _, err := a.Pool().Exec(ctx, `UPDATE idem_leader_leases SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatalf("expire the lease: %v", err)
	}
	taken, err := b.LockPurge(ctx)
	if err != nil {
		t.Fatalf("LockPurge after the lease expired: %v", err)
	}
	defer taken.Unlock(ctx)
	if n, err := lock.PurgeBatch(ctx, idemstore.PurgeParams{Before: time.Now()}); !errors.Is(err, idemstore.ErrPurgeLockLost) {
		t.Fatalf("the expired holder's PurgeBatch = %d, %v; want ErrPurgeLockLost", n, err)
	}
	if _, err := taken.PurgeBatch(ctx, idemstore.PurgeParams{Before: time.Now()}); err != nil {
		t.Fatalf("the new holder's PurgeBatch: %v", err)
	}
}
