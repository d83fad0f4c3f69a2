package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

func databases(t *testing.T) map[string]string {
	t.Helper()
	return map[string]string{
		"sqlite":   "sqlite:" + filepath.Join(t.TempDir(), "ops.db"),
		"postgres": pgtest.NewDatabase(t),
	}
}

func runIdem(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestMigrateUpDownUp(t *testing.T) {
	t.Parallel()
	for kind, db := range databases(t) {
		t.Run(kind, func(t *testing.T) {
			newest := map[string]int{"sqlite": 6, "postgres": 10}[kind]
			for _, step := range []struct {
				args []string
				want string
			}{
				{[]string{"migrate", "--db", db}, fmt.Sprintf("schema version 0 -> %d", newest)},
				{[]string{"migrate", "--db", db}, fmt.Sprintf("schema version %d -> %d", newest, newest)},
				{[]string{"migrate", "--db", db, "--to", "1"}, fmt.Sprintf("schema version %d -> 1", newest)},
				{[]string{"migrate", "--db", db, "--to", "0"}, "schema version 1 -> 0"},
				{[]string{"migrate", "--db", db}, fmt.Sprintf("schema version 0 -> %d", newest)},
			} {
				code, out, errOut := runIdem(t, step.args...)
				if code != exitOK || strings.TrimSpace(out) != step.want {
					t.Fatalf("idem %s: exit %d, %q (stderr %q); want %q", strings.Join(step.args, " "), code, out, errOut, step.want)
				}
			}
		})
	}
}

func TestPurgeDeletesOnlyOldKeys(t *testing.T) {
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
			claimer := store.Store()
			for i, age := range []time.Duration{48 * time.Hour, 30 * time.Hour, time.Hour} {
				res, err := claimer.Claim(ctx, idemstore.ClaimParams{
					Scope: idemstore.Scope{ClientID: "alice", Key: "k" + string(rune('a'+i))}, Method: "POST", Path: "/v1/payments",
					RequestHash: make([]byte, 32), TwoPhase: true, Now: time.Now().Add(-age),
					LockTimeout: time.Second, Retention: 1000 * time.Hour,
				})
				if err != nil || res.Lease == nil {
					t.Fatalf("claim: %v", err)
				}
				if err := res.Lease.Complete(ctx, &idemstore.Response{StatusCode: http.StatusCreated, Header: http.Header{}, Body: []byte("{}")}); err != nil {
					t.Fatal(err)
				}
			}
			code, out, errOut := runIdem(t, "purge", "--db", db, "--older-than", "24h", "--batch", "1")
			if code != exitOK || !strings.HasPrefix(out, "deleted 2 keys created before ") {
				t.Fatalf("purge: exit %d, %q (stderr %q); want 2 deleted", code, out, errOut)
			}
			code, out, _ = runIdem(t, "purge", "--db", db, "--older-than", "24h")
			if code != exitOK || !strings.HasPrefix(out, "deleted 0 keys") {
				t.Fatalf("second purge: exit %d, %q; want 0 deleted", code, out)
			}
		})
	}
}

func TestOperatorCommandsRejectBadUse(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	for _, args := range [][]string{
		{"migrate"},
		{"purge"},
		{"purge", "--db", "sqlite:x.db", "--older-than", "-1h"},
		{"purge", "--db", "sqlite:x.db", "--batch", "-1"},
		{"purge", "--db", "sqlite:x.db", "--share", "-0.1"},
		{"purge", "--db", "sqlite:x.db", "--share", "1.5"},
		{"migrate", "--db", "sqlite:x.db", "--to", "-2"},
	} {
		if code, _, _ := runIdem(t, args...); code != exitUsage {
			t.Errorf("idem %s: exit %d, want %d", strings.Join(args, " "), code, exitUsage)
		}
	}
	if code, _, errOut := runIdem(t, "migrate", "--db", "oracle://x"); code != exitFail || !strings.Contains(errOut, "unsupported database") {
		t.Errorf("migrate with an unsupported URL: exit %d, %q", code, errOut)
	}
}
