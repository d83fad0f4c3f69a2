package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/pgtest"
)

// TestRunRefusesPoolerThatDropsStatements: with -transaction-pooling or
// without, paymentsd refuses at start, with what to add, a URL through a
// PgBouncer in transaction mode that does not keep pgx's prepared
// statements, instead of failing most requests with 503.
func TestRunRefusesPoolerThatDropsStatements(t *testing.T) {
	t.Parallel()
	db := pgtest.StartBouncerDroppingStatements(t)
	for _, args := range [][]string{
		{"-db", db, "-transaction-pooling", "-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0"},
		{"-db", db, "-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0"},
	} {
		// A service that starts serves until the deadline and returns nil.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := Run(ctx, args, io.Discard, io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "add default_query_exec_mode=cache_describe to the database URL") {
			t.Errorf("Run(%q) = %v; want a refusal that names default_query_exec_mode=cache_describe", args[2:], err)
		}
	}
}
