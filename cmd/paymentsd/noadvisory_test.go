package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/pgtest"
)

// TestRunWithoutAdvisoryLocks runs paymentsd on a database whose role is
// refused every advisory lock function: without -no-advisory-locks it
// stops at start with the database's refusal; with it, it migrates,
// creates its tables, charges a payment once and replays it.
func TestRunWithoutAdvisoryLocks(t *testing.T) {
	t.Parallel()
	db := pgtest.NoAdvisoryDatabase(t)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := Run(ctx, []string{"-db", db, "-addr", "127.0.0.1:0", "-admin-addr", "off"}, io.Discard, io.Discard)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "permission denied for function pg_") {
		t.Fatalf("Run without -no-advisory-locks = %v; want the database's refusal of an advisory lock function", err)
	}

	p := runInProcess(t, "-db", db, "-no-advisory-locks", "-addr", "127.0.0.1:0", "-admin-addr", "off", "-tokens", "sk_a=alice")
	base := waitListening(t, p.stdout.lines, "paymentsd -no-advisory-locks")
	body := `{"amount":4200,"currency":"usd","customer":"cus_123"}`
	first := post(t, base, "sk_a", "no-advisory-1", body)
	replay := post(t, base, "sk_a", "no-advisory-1", body)
	if first.status != 201 || replay.status != 201 || !bytes.Equal(first.body, replay.body) || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("create %d %s then retry %d (replayed=%q); want 201 and its replay",
			first.status, first.body, replay.status, replay.header.Get("Idempotent-Replayed"))
	}
	if err := p.stop(t); err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
}
