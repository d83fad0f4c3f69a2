package main

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/pgtest"
)

// TestRefusesPoolerThatDropsStatements: every command that opens the
// database refuses, at once and with what to add, a URL through a PgBouncer
// in transaction mode that does not keep pgx's prepared statements.
func TestRefusesPoolerThatDropsStatements(t *testing.T) {
	t.Parallel()
	bare := bouncerWithoutQueryMode(t)
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

// bouncerWithoutQueryMode starts PgBouncer in front of a new database and
// returns the URL through it with pgx's default query mode.
func bouncerWithoutQueryMode(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(pgtest.StartBouncer(t, pgtest.NewDatabase(t)))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("default_query_exec_mode")
	u.RawQuery = q.Encode()
	return u.String()
}
