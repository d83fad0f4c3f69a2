package mariadb

import (
	"context"
	"database/sql"
	"os"
	"strconv"
	"testing"

	"github.com/idemkit/idem/cmd/internal/database"
)

// TestCrashKeepsCommittedRows: a row committed before a Crash (SIGKILL) is
// there after Start, on the same port, and a transaction left open by the
// crash is not.
func TestCrashKeepsCommittedRows(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a MariaDB server")
	}
	if err := Available(); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ctx := context.Background()
	s, err := New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	url, err := s.CreateDatabase(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	dsn, err := database.MySQLDSN(url)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`CREATE TABLE t (id INT PRIMARY KEY) ENGINE = InnoDB`,
		`INSERT INTO t VALUES (1)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	open, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open.Exec(`INSERT INTO t VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	if err := s.Crash(); err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(); err == nil {
		t.Fatal("the server answered after Crash")
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	db.SetMaxIdleConns(0) // no connection from before the crash
	var n, sum int
	if err := db.QueryRow(`SELECT count(*), COALESCE(SUM(id), 0) FROM t`).Scan(&n, &sum); err != nil {
		t.Fatal(err)
	}
	if n != 1 || sum != 1 {
		t.Errorf("%d rows (ids summing to %d) after the crash; want the committed row 1 alone", n, sum)
	}
}
