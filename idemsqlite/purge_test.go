package idemsqlite_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/race"
)

// TestPurgeLeavesWritersTheirShare purges a backlog of expired keys, in
// batches of 5,000 as the shared default was, while a writer claims and
// completes new keys as fast as it can. SQLite has one writer, which each
// purge batch holds; paced at the store's default share (a tenth), the
// purge leaves the writer nine times each batch's time after it, and the writer
// finishes its fixed count of writes before the purge ends. The test
// assumes no speed, only that a batch of 5,000 deletes is slower than a
// small write transaction. With the batches sent back to back (Share 1)
// it fails here: the purge ends first (docs/benchmarks.md, "A paced purge").
func TestPurgeLeavesWritersTheirShare(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("purges 50,000 keys for about half a minute")
	}
	if race.Enabled {
		// It races no goroutines of its own (the store's are raced by the
		// other tests); under the detector it ran 212 s instead of 15.
		t.Skip("measures the writer's share of time, not races; minutes under -race")
	}
	const (
		backlog = 50_000 // expired keys: 10 batches
		batch   = 5000
		// writes is the writer's transactions (a claim and a completion
		// per key), twenty times the purge's batches.
		writes = 200
	)
	store := openStore(t)
	epoch := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fillKeys(t, store, backlog, epoch)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	now := epoch.Add(25 * time.Hour) // the backlog is past the default retention
	type purged struct {
		n   int64
		err error
		at  time.Time
	}
	purgeDone := make(chan purged, 1)
	writerDone := make(chan error, 1)
	var writerAt time.Time
	go func() {
		n, err := store.Purge(ctx, idemsqlite.PurgeParams{Before: now.Add(-24 * time.Hour), BatchSize: batch})
		purgeDone <- purged{n, err, time.Now()}
	}()
	go func() {
		writerDone <- func() error {
			for i := range writes / 2 {
				res, err := store.Claim(ctx, idemstore.ClaimParams{
					Scope:  idemstore.Scope{ClientID: "alice", Key: fmt.Sprintf("new-%d", i)},
					Method: "POST", Path: "/v1/payments", RequestHash: []byte("h"),
					TwoPhase: true, Now: now, LockTimeout: time.Minute, Retention: 24 * time.Hour,
				})
				if err != nil || res.Lease == nil {
					return fmt.Errorf("claim %d: %v (lease %v)", i, err, res.Lease != nil)
				}
				if err := res.Lease.Complete(ctx, &idemstore.Response{StatusCode: 201}); err != nil {
					return fmt.Errorf("complete %d: %w", i, err)
				}
			}
			writerAt = time.Now()
			return nil
		}()
	}()

	var p purged
	select {
	case p = <-purgeDone:
	case <-ctx.Done():
		t.Fatalf("the purge of %d keys did not end within 5 minutes", backlog)
	}
	if p.err != nil || p.n != backlog {
		t.Fatalf("Purge = %d, %v; want %d, nil", p.n, p.err, backlog)
	}
	var werr error
	select {
	case werr = <-writerDone:
	case <-ctx.Done():
		t.Fatalf("the writer did not finish its %d writes within 5 minutes", writes)
	}
	if werr != nil {
		t.Fatalf("writer: %v", werr)
	}
	if writerAt.IsZero() || !writerAt.Before(p.at) {
		t.Errorf("the purge of %d keys in %d batches ended %s before the writer's %d writes did: the purge took the writer from requests",
			backlog, backlog/batch, writerAt.Sub(p.at), writes)
	}
	t.Logf("writer done %s before the purge", p.at.Sub(writerAt))
}

// TestPurgeCountsWhatItDeleted cancels purges part way, at points spread
// over the batches, and checks each time that the count Purge returns is
// the number of keys that left the table: a batch whose delete committed
// is counted even when the context was cancelled while it ran.
func TestPurgeCountsWhatItDeleted(t *testing.T) {
	t.Parallel()
	const (
		keys   = 1500
		batch  = 100
		trials = 30
	)
	store := openStore(t)
	epoch := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	count := func() int64 {
		t.Helper()
		var n int64
		if err := store.DB().QueryRow(`SELECT count(*) FROM idempotency_keys`).Scan(&n); err != nil {
			t.Fatalf("count: %v", err)
		}
		return n
	}
	for i := range trials {
		fillKeys(t, store, keys, epoch)
		before := count()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		var n int64
		var err error
		go func() {
			defer close(done)
			n, err = store.Purge(ctx, idemsqlite.PurgeParams{Before: epoch.Add(time.Hour), BatchSize: batch, Share: 1})
		}()
		// Cancel after a few of the batches' statements have begun: the
		// i-th trial waits i hundred microseconds, so that across the
		// trials the cancellation lands inside a batch and between two.
		time.Sleep(time.Duration(i) * 100 * time.Microsecond)
		cancel()
		<-done
		if deleted := before - count(); n != deleted {
			t.Fatalf("trial %d: Purge returned %d (err %v), but %d keys left the table", i, n, err, deleted)
		}
		if _, err := store.DB().Exec(`DELETE FROM idempotency_keys`); err != nil {
			t.Fatalf("empty the table: %v", err)
		}
	}
}

// fillKeys inserts n completed keys of 1,000 clients, created a microsecond
// apart from epoch on, with bodies of 233 random bytes.
func fillKeys(t *testing.T, store *idemsqlite.Store, n int, epoch time.Time) {
	t.Helper()
	_, err := store.DB().Exec(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1)
INSERT INTO idempotency_keys (client_id, idempotency_key, request_method, request_path, request_hash,
    status, lease_token, response_status, response_headers, response_body, created_at, locked_at, completed_at)
SELECT 'client-' || (i % 1000), lower(hex(randomblob(16))), 'POST', '/v1/payments', randomblob(32),
    'completed', 1, 201, '{}', randomblob(233), ?2 + i, ?2 + i, ?2 + i FROM n`, n, epoch.UnixMicro())
	if err != nil {
		t.Fatalf("fill %d keys: %v", n, err)
	}
}
