package main

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
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
			claim := func(key string, now time.Time) idem.Lease {
				t.Helper()
				res, err := store.Store().Claim(ctx, idem.ClaimParams{
					Scope: idem.Scope{ClientID: "alice", Key: key}, Method: "POST", Path: "/v1/payments",
					RequestHash: make([]byte, 32), Mode: idem.ModeTwoPhase, Now: now,
					LockTimeout: time.Second, Retention: 1000 * time.Hour,
				})
				if err != nil || res.Lease == nil {
					t.Fatalf("claim %s: %v", key, err)
				}
				return res.Lease
			}
			for i, age := range []time.Duration{48 * time.Hour, 30 * time.Hour, time.Hour} {
				l := claim("k"+string(rune('a'+i)), time.Now().Add(-age))
				if err := l.Complete(ctx, &idem.Response{StatusCode: http.StatusCreated, Header: http.Header{}, Body: []byte("{}")}); err != nil {
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
