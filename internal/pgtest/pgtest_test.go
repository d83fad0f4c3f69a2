package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestMain(m *testing.M) { Main(m) }

// testTimeout bounds each database round trip in these tests.
const testTimeout = 30 * time.Second

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// connect opens a connection that is closed when the test ends.
func connect(t *testing.T, connString string) *pgx.Conn {
	t.Helper()
	ctx := testContext(t)
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// databaseExists asks the shared server whether the database name exists.
func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	_, admin, err := sharedServer()
	if err != nil {
		t.Fatalf("shared server: %v", err)
	}
	var exists bool
	err = admin.QueryRow(testContext(t), "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	if err != nil {
		t.Fatalf("look up database %s: %v", name, err)
	}
	return exists
}

var databaseNameRE = regexp.MustCompile(`^idemtest_[0-9]+_[0-9]+_[0-9a-f]{8}$`)

func TestNewDatabase(t *testing.T) {
	t.Parallel()

	t.Run("GivesDistinctIsolatedDatabases", func(t *testing.T) {
		t.Parallel()
		a, b := NewDatabase(t), NewDatabase(t)
		if a == b {
			t.Fatalf("two calls returned the same database %q", a)
		}
		ctx := testContext(t)
		connA, connB := connect(t, a), connect(t, b)
		var nameA, nameB string
		if err := connA.QueryRow(ctx, "SELECT current_database()").Scan(&nameA); err != nil {
			t.Fatal(err)
		}
		if err := connB.QueryRow(ctx, "SELECT current_database()").Scan(&nameB); err != nil {
			t.Fatal(err)
		}
		if nameA == nameB {
			t.Fatalf("both connection strings lead to database %q", nameA)
		}
		for _, name := range []string{nameA, nameB} {
			if !databaseNameRE.MatchString(name) {
				t.Errorf("database name %q does not match %s", name, databaseNameRE)
			}
		}
		if _, err := connA.Exec(ctx, "CREATE TABLE probe (id int PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		visible := func(conn *pgx.Conn) bool {
			var found bool
			if err := conn.QueryRow(ctx, "SELECT to_regclass('probe') IS NOT NULL").Scan(&found); err != nil {
				t.Fatal(err)
			}
			return found
		}
		if !visible(connA) {
			t.Error("table missing from the database that created it")
		}
		if visible(connB) {
			t.Error("table created in one database is visible in the other")
		}
	})

	t.Run("DropsDatabaseAtCleanup", func(t *testing.T) {
		t.Parallel()
		var name string
		t.Run("Owner", func(t *testing.T) {
			connString := NewDatabase(t)
			conn := connect(t, connString) // a session still open at cleanup
			if err := conn.QueryRow(testContext(t), "SELECT current_database()").Scan(&name); err != nil {
				t.Fatal(err)
			}
			if !databaseExists(t, name) {
				t.Fatalf("database %s missing while its test runs", name)
			}
		})
		if name == "" {
			t.Skip("the owner test did not get a database")
		}
		if databaseExists(t, name) {
			t.Errorf("database %s still exists after its test ended", name)
		}
	})

	t.Run("ServesParallelTests", func(t *testing.T) {
		t.Parallel()
		const tests = 8
		for i := range tests {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				pool := NewPool(t)
				ctx := testContext(t)
				if _, err := pool.Exec(ctx, "CREATE TABLE owner (n int)"); err != nil {
					t.Fatal(err)
				}
				if _, err := pool.Exec(ctx, "INSERT INTO owner VALUES ($1)", i); err != nil {
					t.Fatal(err)
				}
				var ns []int32
				rows, err := pool.Query(ctx, "SELECT n FROM owner")
				if err != nil {
					t.Fatal(err)
				}
				ns, err = pgx.CollectRows(rows, pgx.RowTo[int32])
				if err != nil {
					t.Fatal(err)
				}
				if len(ns) != 1 || int(ns[0]) != i {
					t.Errorf("rows = %v, want only [%d]", ns, i)
				}
			})
		}
	})
}

func TestNewPool(t *testing.T) {
	t.Parallel()
	pool := NewPool(t)
	var name string
	if err := pool.QueryRow(testContext(t), "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	if !databaseNameRE.MatchString(name) {
		t.Errorf("pool is on database %q, want a fresh idemtest_ database", name)
	}
}

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		connString string
		want       string // database the result must name
		wantErr    bool
	}{
		{name: "ReplacesURLPath", connString: "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", want: "idemtest_1"},
		{name: "AddsURLPath", connString: "postgresql://u:p@db.example:6543?sslmode=require", want: "idemtest_2"},
		{name: "KeepsURLQuery", connString: "postgres://u@h/old?application_name=x&sslmode=disable", want: "idemtest_3"},
		{name: "OverridesKeywordValue", connString: "host=127.0.0.1 user=postgres dbname=postgres sslmode=disable", want: "idemtest_4"},
		{name: "QuotesKeywordValue", connString: "host=127.0.0.1 user=postgres", want: `odd'name\x`},
		{name: "RejectsEmpty", connString: "  ", wantErr: true},
		{name: "RejectsBadURL", connString: "postgres://u@h:notaport/db", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := withDatabase(tt.connString, tt.want)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("withDatabase(%q) = %q, want an error", tt.connString, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := pgconn.ParseConfig(got)
			if err != nil {
				t.Fatalf("result %q does not parse: %v", got, err)
			}
			if cfg.Database != tt.want {
				t.Errorf("database = %q, want %q (from %q)", cfg.Database, tt.want, got)
			}
			orig, err := pgconn.ParseConfig(tt.connString)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != orig.Host || cfg.Port != orig.Port || cfg.User != orig.User || cfg.Password != orig.Password {
				t.Errorf("server changed: %s@%s:%d, want %s@%s:%d", cfg.User, cfg.Host, cfg.Port, orig.User, orig.Host, orig.Port)
			}
			if strings.HasPrefix(tt.connString, "postgres") {
				u, _ := url.Parse(tt.connString)
				v, _ := url.Parse(got)
				if u.RawQuery != v.RawQuery {
					t.Errorf("query = %q, want %q", v.RawQuery, u.RawQuery)
				}
			}
		})
	}
}

func TestUniqueDatabaseName(t *testing.T) {
	t.Parallel()
	seen := make(map[string]bool)
	for range 100 {
		name, err := uniqueDatabaseName()
		if err != nil {
			t.Fatal(err)
		}
		if !databaseNameRE.MatchString(name) || len(name) > 63 {
			t.Fatalf("name %q is not a valid idemtest_ name of at most 63 bytes", name)
		}
		if seen[name] {
			t.Fatalf("name %q returned twice", name)
		}
		seen[name] = true
	}
}
