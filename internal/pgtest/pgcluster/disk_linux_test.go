package pgcluster

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestFullWAL fills the WAL's file system under a running server: writes
// fail, committed rows survive, and once the space is back the server
// runs again (restarted if it stopped) and takes writes.
func TestFullWAL(t *testing.T) {
	t.Parallel()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs for the WAL needs root")
	}
	ctx := context.Background()
	c, err := New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.LimitWAL(ctx, 128<<20); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec("CREATE TABLE t (b text)"); err != nil {
		t.Fatal(err)
	}
	if err := exec("INSERT INTO t VALUES ('committed')"); err != nil {
		t.Fatal(err)
	}
	if err := c.FillWAL(); err != nil {
		t.Fatal(err)
	}
	// Enough WAL to need a new segment.
	var failed error
	for range 200 {
		if failed = exec("INSERT INTO t SELECT repeat('x', 1000) FROM generate_series(1, 2000)"); failed != nil {
			break
		}
	}
	if failed == nil {
		t.Fatal("writes went on with the WAL's file system full")
	}
	t.Logf("with the WAL full: %v", failed)
	if err := c.FreeWAL(); err != nil {
		t.Fatal(err)
	}
	if !c.Running() {
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := exec("INSERT INTO t VALUES ('after')")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write after the space came back: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM t WHERE b IN ('committed', 'after')").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows after the full disk: %d, %v; want the committed one and the new one", n, err)
	}
}
