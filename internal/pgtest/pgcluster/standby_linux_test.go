package pgcluster

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestStandbyFailover replicates a primary synchronously, stops it as
// pg_ctl stop -m immediate does, promotes the standby, and finds every
// committed row there, with the standby taking writes.
func TestStandbyFailover(t *testing.T) {
	t.Parallel()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	primary, err := New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close()
	standby, err := primary.NewStandby(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close()
	if err := primary.SetSynchronous(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := primary.WaitStandby(ctx, true); err != nil {
		t.Fatal(err)
	}
	exec := func(c *Cluster, sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(primary, "CREATE TABLE t (n int)")
	for range 20 {
		exec(primary, "INSERT INTO t VALUES (1)")
	}
	if err := primary.Crash(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	exec(standby, "INSERT INTO t VALUES (1)")
	var n int
	if err := standby.query(ctx, "SELECT count(*) FROM t", &n); err != nil {
		t.Fatal(err)
	}
	if n != 21 {
		t.Fatalf("the promoted standby holds %d rows, want the 20 committed on the primary and 1 of its own", n)
	}
	// The promoted standby gets a standby of its own, and commits wait
	// for it. (synchronous_standby_names is not inherited: ALTER SYSTEM
	// wrote it to the primary's configuration after the base backup.)
	if err := standby.SetSynchronous(ctx, true); err != nil {
		t.Fatal(err)
	}
	next, err := standby.NewStandby(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if err := standby.WaitStandby(ctx, true); err != nil {
		t.Fatal(err)
	}
	exec(standby, "INSERT INTO t VALUES (1)")
}
