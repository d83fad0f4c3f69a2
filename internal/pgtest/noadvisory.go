package pgtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// NoAdvisoryRole is the role of NoAdvisoryDatabase.
const NoAdvisoryRole = "idem_no_advisory"

// NoAdvisoryDatabase starts a throwaway cluster (REVOKE ... FROM PUBLIC
// needs a role of its own, and roles are cluster-wide: never on the shared
// server) on which every pg_advisory* and pg_try_advisory* function is
// refused to NoAdvisoryRole, the owner of the returned database, and
// returns that database's connection string for NoAdvisoryRole: a
// database without advisory locks, as distributed PostgreSQL-compatible
// ones are. It checks that the role is refused.
func NoAdvisoryDatabase(t testing.TB) string {
	t.Helper()
	cluster := StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, cluster.URL("postgres"))
	if err != nil {
		t.Fatalf("connect as postgres: %v", err)
	}
	defer conn.Close(context.Background())
	for _, q := range []string{
		`CREATE ROLE ` + NoAdvisoryRole + ` LOGIN`,
		`CREATE DATABASE idem_no_advisory OWNER ` + NoAdvisoryRole,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Functions are granted per database, in its pg_proc.
	db, err := pgx.Connect(ctx, cluster.URL("idem_no_advisory"))
	if err != nil {
		t.Fatalf("connect as postgres: %v", err)
	}
	defer db.Close(context.Background())
	_, err = db.Exec(ctx, `DO $$
DECLARE f regprocedure;
BEGIN
    FOR f IN SELECT oid::regprocedure FROM pg_proc
             WHERE proname LIKE 'pg\_advisory%' OR proname LIKE 'pg\_try\_advisory%'
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$`)
	if err != nil {
		t.Fatalf("revoke the advisory lock functions: %v", err)
	}
	var revoked int
	err = db.QueryRow(ctx, `SELECT count(*) FROM pg_proc
WHERE (proname LIKE 'pg\_advisory%' OR proname LIKE 'pg\_try\_advisory%')
  AND NOT has_function_privilege($1, oid, 'EXECUTE')`, NoAdvisoryRole).Scan(&revoked)
	if err != nil || revoked < 20 {
		t.Fatalf("%d advisory lock functions refused to %s (%v); want them all (PostgreSQL has 24)", revoked, NoAdvisoryRole, err)
	}
	url := strings.Replace(cluster.URL("idem_no_advisory"), "://postgres@", "://"+NoAdvisoryRole+"@", 1)
	user, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect as %s: %v", NoAdvisoryRole, err)
	}
	defer user.Close(context.Background())
	var pgErr *pgconn.PgError
	if _, err := user.Exec(ctx, `SELECT pg_try_advisory_lock(1)`); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Fatalf("pg_try_advisory_lock as %s: %v; want SQLSTATE 42501 (insufficient privilege)", NoAdvisoryRole, err)
	}
	return url
}
