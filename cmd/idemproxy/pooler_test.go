package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/pgtest"
)

// TestRunRefusesPoolerThatDropsStatements: idemproxy refuses at start,
// with what to add, a key store URL through a PgBouncer in transaction mode
// that does not keep pgx's prepared statements.
func TestRunRefusesPoolerThatDropsStatements(t *testing.T) {
	t.Parallel()
	db := pgtest.StartBouncerDroppingStatements(t)
	args := []string{"-upstream", "http://127.0.0.1:1", "-client-header", "X-Client", "-db", db,
		"-listen", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0"}
	// A proxy that starts serves until the deadline and returns nil.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := run(ctx, args, io.Discard, io.Discard, envOf(map[string]string{"IDEMPROXY_SECRET": strings.Repeat("s", 16)}))
	if err == nil || !strings.Contains(err.Error(), "add default_query_exec_mode=cache_describe to the database URL") {
		t.Fatalf("run through PgBouncer without cache_describe = %v; want a refusal that names default_query_exec_mode=cache_describe", err)
	}
}
