package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

// TestPurgeDryRun: --dry-run counts what a purge deletes, deletes nothing,
// and neither counts nor deletes a key in flight.
func TestPurgeDryRun(t *testing.T) {
	t.Parallel()
	for kind, db := range databases(t) {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			if code, _, errOut := runIdem(t, "migrate", "--db", db); code != exitOK {
				t.Fatalf("migrate: %s", errOut)
			}
			store, err := openStore(ctx, db, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			claim := func(key string, now time.Time) idemstore.Lease {
				t.Helper()
				res, err := store.Store().Claim(ctx, idemstore.ClaimParams{
					Scope: idemstore.Scope{ClientID: "alice", Key: key}, Method: "POST", Path: "/v1/payments",
					RequestHash: make([]byte, 32), TwoPhase: true, Now: now,
					LockTimeout: time.Second, Retention: 1000 * time.Hour,
				})
				if err != nil || res.Lease == nil {
					t.Fatalf("claim %s: %v", key, err)
				}
				return res.Lease
			}
			for i, age := range []time.Duration{48 * time.Hour, 30 * time.Hour, time.Hour} {
				l := claim("k"+string(rune('a'+i)), time.Now().Add(-age))
				if err := l.Complete(ctx, &idemstore.Response{StatusCode: http.StatusCreated, Header: http.Header{}, Body: []byte("{}")}); err != nil {
					t.Fatal(err)
				}
			}
			// A key created 48 h ago whose lease was taken over just now: in
			// flight, never counted nor deleted.
			claim("stuck", time.Now().Add(-48*time.Hour))
			inFlight := claim("stuck", time.Now())
			defer inFlight.Release(ctx)

			for range 2 {
				code, out, errOut := runIdem(t, "purge", "--db", db, "--older-than", "24h", "--dry-run")
				if code != exitOK || !strings.HasPrefix(out, "dry run: would delete 2 keys created before ") {
					t.Fatalf("purge --dry-run: exit %d, %q (stderr %q); want 2 counted", code, out, errOut)
				}
			}
			code, out, errOut := runIdem(t, "purge", "--db", db, "--older-than", "24h")
			if code != exitOK || !strings.HasPrefix(out, "deleted 2 keys created before ") {
				t.Fatalf("purge after the dry runs: exit %d, %q (stderr %q); want 2 deleted", code, out, errOut)
			}
			code, out, _ = runIdem(t, "purge", "--db", db, "--older-than", "24h", "--dry-run")
			if code != exitOK || !strings.HasPrefix(out, "dry run: would delete 0 keys") {
				t.Fatalf("purge --dry-run after the purge: exit %d, %q; want 0", code, out)
			}
		})
	}
}

func TestPurgeRefusesRetentionNotLongerThanLease(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"purge", "--db", "sqlite:x.db", "--older-than", "30s"},
		{"purge", "--db", "sqlite:x.db", "--older-than", "1h", "--lock-timeout", "2h"},
	} {
		code, _, errOut := runIdem(t, args...)
		if code != exitUsage || !strings.Contains(errOut, "must be longer than the lease") {
			t.Errorf("idem %s: exit %d, %q; want %d and the reason", strings.Join(args, " "), code, errOut, exitUsage)
		}
	}
}

// TestPurgeBelowRetentionNeedsConfirmation: an --older-than shorter than
// the retention deletes completed keys that clients may still retry with,
// and each retry then runs again; purge refuses it, deleting nothing,
// unless --i-know and --reason.
func TestPurgeBelowRetentionNeedsConfirmation(t *testing.T) {
	t.Parallel()
	for kind, db := range databases(t) {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			if code, _, errOut := runIdem(t, "migrate", "--db", db); code != exitOK {
				t.Fatalf("migrate: %s", errOut)
			}
			store, err := openStore(ctx, db, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			scope := idemstore.Scope{ClientID: "alice", Key: "acked"}
			// A payment acknowledged 33 s ago: its client may retry for
			// another 24 h.
			res, err := store.Store().Claim(ctx, idemstore.ClaimParams{
				Scope: scope, Method: "POST", Path: "/v1/payments", RequestHash: make([]byte, 32),
				TwoPhase: true, Now: time.Now().Add(-33 * time.Second),
				LockTimeout: time.Second, Retention: idem.RetentionDefault,
			})
			if err != nil || res.Lease == nil {
				t.Fatalf("claim: %v", err)
			}
			if err := res.Lease.Complete(ctx, &idemstore.Response{StatusCode: http.StatusCreated, Header: http.Header{}, Body: []byte("{}")}); err != nil {
				t.Fatal(err)
			}
			var admin idemstore.KeyAdmin = store.Postgres
			if store.SQLite != nil {
				admin = store.SQLite
			}
			exists := func() bool {
				t.Helper()
				_, err := admin.GetKey(ctx, scope)
				if err != nil && !errors.Is(err, idemstore.ErrKeyNotFound) {
					t.Fatal(err)
				}
				return err == nil
			}
			purge := []string{"purge", "--db", db, "--older-than", "10s", "--lock-timeout", "5s"}
			for _, extra := range [][]string{nil, {"--i-know"}, {"--reason", "INC-7"}, {"--i-know", "--reason", " "}} {
				code, out, errOut := runIdem(t, append(purge, extra...)...)
				if code != exitUsage || out != "" || !strings.Contains(errOut, "refused: --older-than (10s) is shorter than the retention (24h0m0s") {
					t.Errorf("purge %v below the retention: exit %d, %q (stderr %q); want %d and the refusal", extra, code, out, errOut, exitUsage)
				}
				if !exists() {
					t.Fatalf("purge %v below the retention deleted the key acknowledged 33 s ago", extra)
				}
			}
			// A dry run deletes nothing, so it needs no confirmation.
			code, out, errOut := runIdem(t, append(purge, "--dry-run")...)
			if code != exitOK || !strings.HasPrefix(out, "dry run: would delete 1 keys") || !strings.Contains(out, "a real run needs --i-know") {
				t.Errorf("purge --dry-run below the retention: exit %d, %q (stderr %q)", code, out, errOut)
			}
			// Purging at the retention the service publishes needs none.
			code, out, errOut = runIdem(t, append(purge, "--retention", "10s")...)
			if code != exitOK || !strings.HasPrefix(out, "deleted 1 keys") {
				t.Fatalf("purge at the retention: exit %d, %q (stderr %q); want 1 deleted", code, out, errOut)
			}
			if exists() {
				t.Fatal("the key is still there after the purge at --retention")
			}
		})
	}
}

// TestPurgeBelowRetentionWithConfirmation: with --i-know and --reason,
// the purge below the retention runs, and logs who and why.
func TestPurgeBelowRetentionWithConfirmation(t *testing.T) {
	t.Parallel()
	for kind, db := range databases(t) {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			if code, _, errOut := runIdem(t, "migrate", "--db", db); code != exitOK {
				t.Fatalf("migrate: %s", errOut)
			}
			store, err := openStore(ctx, db, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			for _, key := range []string{"acked", "fresh"} {
				age := map[string]time.Duration{"acked": 33 * time.Second, "fresh": 0}[key]
				res, err := store.Store().Claim(ctx, idemstore.ClaimParams{
					Scope: idemstore.Scope{ClientID: "alice", Key: key}, Method: "POST", Path: "/v1/payments", RequestHash: make([]byte, 32),
					TwoPhase: true, Now: time.Now().Add(-age), LockTimeout: time.Second, Retention: idem.RetentionDefault,
				})
				if err != nil || res.Lease == nil {
					t.Fatalf("claim: %v", err)
				}
				if err := res.Lease.Complete(ctx, &idemstore.Response{StatusCode: http.StatusCreated, Header: http.Header{}, Body: []byte("{}")}); err != nil {
					t.Fatal(err)
				}
			}
			code, out, errOut := runIdem(t, "purge", "--db", db, "--older-than", "10s", "--lock-timeout", "5s", "--i-know", "--reason", "INC-7: disk full")
			if code != exitOK || !strings.HasPrefix(out, "deleted 1 keys") {
				t.Fatalf("purge --i-know below the retention: exit %d, %q (stderr %q); want the key acknowledged 33 s ago deleted", code, out, errOut)
			}
			if !strings.Contains(errOut, "purged keys younger than the retention") || !strings.Contains(errOut, `reason="INC-7: disk full"`) {
				t.Errorf("stderr %q; want the logged reason", errOut)
			}
		})
	}
}
