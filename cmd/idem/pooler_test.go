package main

import (
	"context"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/pgtest"
)

// TestRefusesPoolerThatDropsStatements: every command that opens the
// database refuses, at once and with what to add, a URL through a PgBouncer
// in transaction mode that does not keep pgx's prepared statements.
func TestRefusesPoolerThatDropsStatements(t *testing.T) {
	t.Parallel()
	bare := pgtest.StartBouncerDroppingStatements(t)
	for _, args := range [][]string{
		{"migrate", "--db", bare},
		{"keys", "list", "--db", bare},
		{"purge", "--db", bare, "--older-than", "48h"},
	} {
		var stdout, stderr strings.Builder
		code := Run(context.Background(), args, &stdout, &stderr)
		if code != exitFail || !strings.Contains(stderr.String(), "add default_query_exec_mode=cache_describe to the database URL") {
			t.Errorf("idem %s through PgBouncer without cache_describe: exit %d, stderr %q; want %d and the fix",
				args[0], code, stderr.String(), exitFail)
		}
	}
}
