package idemtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/idemstore"
)

// The conformance cases about maintenance: purge and schema version.

// purgerOf returns store's Purge, or skips the test for a store without one.
func purgerOf(t *testing.T, store idemstore.Store) purger {
	t.Helper()
	p, ok := store.(purger)
	if !ok {
		t.Skip("the store has no Purge(context.Context, idemstore.PurgeParams) (int64, error) method")
	}
	return p
}

// completedKeys stores n completed keys created at created.
func (s suite) completedKeys(t *testing.T, store idemstore.Store, n int, created time.Time) []idemstore.Scope {
	t.Helper()
	scopes := make([]idemstore.Scope, n)
	for i := range scopes {
		scopes[i] = newScope("alice")
		complete(t, s.mustLease(t, store, s.params(scopes[i], "a", created)), sampleResponse("{}"))
	}
	return scopes
}

// wantKept checks that the keys of scopes are still stored, at now.
func (s suite) wantKept(t *testing.T, store idemstore.Store, scopes []idemstore.Scope, now time.Time) {
	t.Helper()
	for _, scope := range scopes {
		if rec := s.mustRecord(t, store, s.params(scope, "a", now)); rec.Status != idemstore.StatusCompleted {
			t.Errorf("key %s: status %q, want completed", scope.Key, rec.Status)
		}
	}
}

func (s suite) purgeDeletesOldKeys(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	pg := purgerOf(t, store)
	old := s.completedKeys(t, store, 5, epoch)
	young := s.completedKeys(t, store, 2, epoch.Add(2*time.Hour))
	n, err := pg.Purge(context.Background(), idemstore.PurgeParams{Before: epoch.Add(time.Hour), BatchSize: 2})
	if err != nil || n != int64(len(old)) {
		t.Fatalf("Purge = %d, %v; want %d, nil", n, err, len(old))
	}
	s.wantKept(t, store, young, epoch.Add(3*time.Hour))
	for _, scope := range old {
		// Within retention, so the key was purged, not expired.
		l := s.mustLease(t, store, s.params(scope, "a", epoch.Add(3*time.Hour)))
		release(t, l)
	}
	if n, err := pg.Purge(context.Background(), idemstore.PurgeParams{Before: epoch.Add(time.Hour), BatchSize: 2}); err != nil || n != 0 {
		t.Errorf("second Purge = %d, %v; want 0, nil", n, err)
	}
}

// purgeExactCutoff: the purge deletes keys created strictly before
// PurgeParams.Before ([idemstore.PurgeParams.Purges]); a key created
// exactly at the cutoff stays, and goes with the next purge whose cutoff
// is past it. A claim at exactly its creation plus retention already
// treats it as gone ([idemstore.Expired]): the purge never deletes a key
// a claim would still answer with.
func (s suite) purgeExactCutoff(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	pg := purgerOf(t, store)
	cutoff := epoch.Add(time.Hour)
	before := s.completedKeys(t, store, 1, cutoff.Add(-time.Microsecond))
	at := s.completedKeys(t, store, 1, cutoff)
	after := s.completedKeys(t, store, 1, cutoff.Add(time.Microsecond))
	p := idemstore.PurgeParams{Before: cutoff}
	rec := &idemstore.Record{Status: idemstore.StatusCompleted, CreatedAt: cutoff}
	if p.Purges(rec) {
		t.Fatalf("idemstore: PurgeParams.Purges deletes a key created exactly at Before; this test expects it kept")
	}
	if n, err := pg.Purge(context.Background(), p); err != nil || n != 1 {
		t.Fatalf("Purge(Before: %v) = %d, %v; want 1 (only the key created a microsecond before), nil", cutoff, n, err)
	}
	s.wantKept(t, store, append(at, after...), cutoff.Add(time.Minute))
	if l := s.mustLease(t, store, s.params(before[0], "a", cutoff.Add(time.Minute))); l.Info().TakenOver {
		t.Errorf("the purged key was taken over; want it new")
	} else {
		release(t, l)
	}
	// A claim at exactly creation plus retention replaces the key at the
	// cutoff, as new: it is expired though the purge kept it.
	if !idemstore.Expired(cutoff, cutoff.Add(retention), retention) {
		t.Fatalf("idemstore: Expired keeps a key at exactly its creation plus retention; this test expects it expired")
	}
	l := s.mustLease(t, store, s.params(at[0], "b", cutoff.Add(retention)))
	if info := l.Info(); info.TakenOver {
		t.Errorf("claim at exactly creation plus retention: Info() = %+v; want the key replaced as new", info)
	}
	release(t, l)
	if n, err := pg.Purge(context.Background(), idemstore.PurgeParams{Before: cutoff.Add(time.Microsecond)}); err != nil || n != 0 {
		t.Fatalf("Purge(Before: cutoff+1µs) = %d, %v; want 0 (the key at the cutoff was replaced, and released), nil", n, err)
	}
	if n, err := pg.Purge(context.Background(), idemstore.PurgeParams{Before: cutoff.Add(2 * time.Microsecond)}); err != nil || n != 1 {
		t.Fatalf("Purge(Before: cutoff+2µs) = %d, %v; want 1 (the key created a microsecond after the cutoff), nil", n, err)
	}
}

func (s suite) purgeZeroBatchSize(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	pg := purgerOf(t, store)
	old := s.completedKeys(t, store, 3, epoch)
	n, err := pg.Purge(context.Background(), idemstore.PurgeParams{Before: epoch.Add(time.Hour)})
	if err != nil || n != int64(len(old)) {
		t.Fatalf("Purge with BatchSize 0 = %d, %v; want %d, nil (the default batch size)", n, err, len(old))
	}
}

func (s suite) purgeRejectsNegativeBatchSize(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	pg := purgerOf(t, store)
	old := s.completedKeys(t, store, 2, epoch)
	p := idemstore.PurgeParams{Before: epoch.Add(time.Hour), BatchSize: -1}
	n, err := pg.Purge(context.Background(), p)
	if want := p.Validate(); want == nil || !errors.Is(err, want) || n != 0 {
		t.Errorf("Purge with BatchSize -1 = %d, %v; want 0 and an error wrapping %v", n, err, want)
	}
	s.wantKept(t, store, old, epoch.Add(2*time.Hour))
}

func (s suite) purgeRequiresBefore(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	pg := purgerOf(t, store)
	old := s.completedKeys(t, store, 1, epoch)
	p := idemstore.PurgeParams{BatchSize: 10}
	n, err := pg.Purge(context.Background(), p)
	if want := p.Validate(); want == nil || !errors.Is(err, want) || n != 0 {
		t.Errorf("Purge without Before = %d, %v; want 0 and an error wrapping %v", n, err, want)
	}
	s.wantKept(t, store, old, epoch.Add(2*time.Hour))
}

func (s suite) schemaVersion(t *testing.T) {
	if s.h.NewUnmigrated == nil {
		t.Skip("Harness.NewUnmigrated is nil")
	}
	t.Parallel()
	store := s.h.NewUnmigrated(t)
	m, ok := store.(migrator)
	if !ok {
		t.Fatalf("%T from Harness.NewUnmigrated has no Migrate, MigrateTo and SchemaVersion methods", store)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	version := func(want int, when string) {
		t.Helper()
		if v, err := m.SchemaVersion(ctx); err != nil || v != want {
			t.Fatalf("SchemaVersion %s = %d, %v; want %d", when, v, err, want)
		}
	}
	// Reading the version of an empty database finds none and changes
	// nothing, however often it is read.
	version(0, "before migration")
	version(0, "read again before migration")
	if err := m.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	newest, err := m.SchemaVersion(ctx)
	if err != nil || newest < 1 {
		t.Fatalf("SchemaVersion after Migrate = %d, %v; want the newest version, at least 1", newest, err)
	}
	complete(t, s.mustLease(t, store, s.params(newScope("alice"), "a", epoch)), sampleResponse("{}"))
	if err := m.Migrate(ctx); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	version(newest, "after a second Migrate")
	if err := m.MigrateTo(ctx, newest+1); err == nil {
		t.Errorf("MigrateTo(%d), past the newest, succeeded", newest+1)
	}
	version(newest, "after MigrateTo past the newest")
	if err := m.MigrateTo(ctx, 0); err != nil {
		t.Fatalf("MigrateTo(0): %v", err)
	}
	version(0, "after MigrateTo(0)")
	if err := m.MigrateTo(ctx, -1); err != nil {
		t.Fatalf("MigrateTo(-1): %v", err)
	}
	version(newest, "after MigrateTo(-1)")
	complete(t, s.mustLease(t, store, s.params(newScope("alice"), "a", epoch)), sampleResponse("{}"))
}
