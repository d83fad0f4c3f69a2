package pgtest

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestStartBouncer reaches a new database through PgBouncer. What pooling
// by transaction means for idempg is tested there, through this.
func TestStartBouncer(t *testing.T) {
	t.Parallel()
	direct := NewDatabase(t)
	via := StartBouncer(t, direct)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, via)
	if err != nil {
		t.Fatalf("connect through PgBouncer: %v", err)
	}
	defer conn.Close(context.Background())
	var db string
	if err := conn.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatalf("query through PgBouncer: %v", err)
	}
	u, _ := url.Parse(direct)
	if "/"+db != u.Path {
		t.Errorf("current_database() = %q through PgBouncer, want the database of %s", db, u.Path)
	}
}
