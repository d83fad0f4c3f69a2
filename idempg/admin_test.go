package idempg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/pgtest"
)

func TestAdmin(t *testing.T) {
	t.Parallel()
	connString := pgtest.NewDatabase(t)
	admin := newPool(t, connString, 2)
	idemtest.RunAdminTests(t, idemtest.Harness{
		NewStore: func(t *testing.T) idemstore.Store {
			return setupOn(t, schemaPool(t, admin, connString), nil)
		},
	})
}

func TestReady(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	pool := newPool(t, pgtest.NewDatabase(t), 2)
	store, err := idempg.New(pool, &idempg.Config{Logger: quiet})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	var sv *idemstore.SchemaVersionError
	if err := store.Ready(ctx); !errors.As(err, &sv) || sv.Have != 0 || sv.Want < 1 {
		t.Fatalf("Ready before migrating = %v, want a SchemaVersionError from 0", err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if err := store.Ready(ctx); err != nil {
		t.Fatalf("Ready after migrating = %v", err)
	}
	pool.Close()
	if err := store.Ready(ctx); !errors.Is(err, idemstore.ErrUnavailable) {
		t.Fatalf("Ready on a closed pool = %v, want ErrUnavailable", err)
	}
}

// TestLeaseExpiryOfOlderBuilds: keys written by a build that does not know
// lease_expires_at (migration 006) are judged by locked_at and the lock
// timeout the operator gives: a row from before the migration, and a key
// that such a build takes over or releases after it, whose recorded expiry
// would otherwise be its previous holder's.
func TestLeaseExpiryOfOlderBuilds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	pool := newPool(t, pgtest.NewDatabase(t), 2)
	store, err := idempg.New(pool, &idempg.Config{Logger: quiet})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := store.MigrateTo(ctx, 5); err != nil {
		t.Fatalf("MigrateTo(5): %v", err)
	}
	epoch := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// The statements of the build before migration 006.
	const (
		oldInsert = `INSERT INTO idempotency_keys
    (client_id, idempotency_key, request_method, request_path, request_hash, request_fields,
     status, lease_token, created_at, locked_at)
VALUES ($1, $2, 'POST', '/v1/payments', '\x00', NULL, 'started', 1, $3, $3)`
		oldTakeOver = `UPDATE idempotency_keys SET lease_token = lease_token + 1, locked_at = $3
WHERE client_id = $1 AND idempotency_key = $2 AND status = 'started'`
		oldUnlock = `UPDATE idempotency_keys SET locked_at = NULL WHERE client_id = $1 AND idempotency_key = $2`
	)
	before := idemstore.Scope{ClientID: "alice", Key: "before-migration"}
	if _, err := pool.Exec(ctx, oldInsert, before.ClientID, before.Key, epoch); err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	lease := func(scope idemstore.Scope) (locked, expires time.Time) {
		t.Helper()
		rec, err := store.GetKey(ctx, scope)
		if err != nil {
			t.Fatalf("GetKey: %v", err)
		}
		return rec.LockedAt, rec.LeaseExpires
	}
	if locked, expires := lease(before); !locked.Equal(epoch) || !expires.IsZero() {
		t.Errorf("a row from before the migration: locked at %v, expires %v; want %v and no recorded expiry", locked, expires, epoch)
	}
	var live *idemstore.LeaseLiveError
	_, err = store.ReleaseKey(ctx, idemstore.ReleaseKeyParams{Scope: before, Now: epoch.Add(time.Minute), LockTimeout: time.Hour})
	if !errors.As(err, &live) || !live.Expires.Equal(epoch.Add(time.Hour)) {
		t.Errorf("ReleaseKey of a row from before the migration, given a 1h lock timeout = %v; want live until %v", err, epoch.Add(time.Hour))
	}

	// This build claims a key with a 10-minute lease; an older one takes it
	// over after the lease, then another older one releases it.
	scope := idemstore.Scope{ClientID: "alice", Key: "mixed"}
	res, err := store.Claim(ctx, idemstore.ClaimParams{
		Scope: scope, Method: "POST", Path: "/v1/payments", RequestHash: []byte{0}, TwoPhase: true,
		Now: epoch, LockTimeout: 10 * time.Minute, Retention: idem.RetentionDefault,
	})
	if err != nil || res.Lease == nil {
		t.Fatalf("Claim: %+v, %v", res, err)
	}
	if _, expires := lease(scope); !expires.Equal(epoch.Add(10 * time.Minute)) {
		t.Fatalf("recorded expiry %v, want %v", expires, epoch.Add(10*time.Minute))
	}
	takenAt := epoch.Add(11 * time.Minute)
	if _, err := pool.Exec(ctx, oldTakeOver, scope.ClientID, scope.Key, takenAt); err != nil {
		t.Fatal(err)
	}
	if locked, expires := lease(scope); !locked.Equal(takenAt) || !expires.IsZero() {
		t.Errorf("after an older build's takeover: locked at %v, expires %v; want %v and no recorded expiry", locked, expires, takenAt)
	}
	_, err = store.ReleaseKey(ctx, idemstore.ReleaseKeyParams{Scope: scope, Now: takenAt.Add(time.Second), LockTimeout: 30 * time.Second})
	if !errors.As(err, &live) || !live.Expires.Equal(takenAt.Add(30*time.Second)) {
		t.Errorf("ReleaseKey after an older build's takeover = %v; want live until %v", err, takenAt.Add(30*time.Second))
	}
	if _, err := pool.Exec(ctx, oldUnlock, scope.ClientID, scope.Key); err != nil {
		t.Fatal(err)
	}
	var raw *time.Time
	if err := pool.QueryRow(ctx, `SELECT lease_expires_at FROM idempotency_keys WHERE client_id = $1 AND idempotency_key = $2`,
		scope.ClientID, scope.Key).Scan(&raw); err != nil || raw != nil {
		t.Errorf("after an older build's release: lease_expires_at = %v, %v; want NULL", raw, err)
	}
	if err := store.MigrateTo(ctx, 5); err != nil {
		t.Errorf("MigrateTo(5) back: %v", err)
	}
}
