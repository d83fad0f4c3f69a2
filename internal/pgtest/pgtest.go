package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// EnvDatabaseURL names the environment variable that points the tests at
	// a server of the user's choice.
	EnvDatabaseURL = "TEST_DATABASE_URL"

	// EnvCI names the environment variable that, when true, turns a missing
	// PostgreSQL from a skipped test into a failed one.
	EnvCI = "CI"

	// LocalURL is the server tried when EnvDatabaseURL is not set.
	LocalURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

	// DatabasePrefix starts the name of every database NewDatabase creates.
	DatabasePrefix = "idemtest_"
)

const (
	envPingTimeout   = 10 * time.Second
	localPingTimeout = 2 * time.Second
	databaseTimeout  = 30 * time.Second
	adminMaxConns    = 4
)

var (
	// mainActive records that Main runs the tests, so that a shared cluster
	// started on demand is stopped at the end.
	mainActive atomic.Bool

	// databaseSeq numbers the databases of this process.
	databaseSeq atomic.Uint64

	shared struct {
		once  sync.Once
		url   string
		admin *pgxpool.Pool
		err   error
	}
)

// Main runs the tests of m, then stops and removes every cluster this
// package started that is still running, then exits with the tests' code.
// Call it from TestMain.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit: it runs the tests, stops the clusters it
// started and returns the exit code, for a TestMain with cleanup of its own.
func Run(m *testing.M) int {
	mainActive.Store(true)
	code := m.Run()
	if err := shutdown(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// shutdown closes the shared admin pool and every live cluster.
func shutdown() error {
	if shared.admin != nil {
		shared.admin.Close()
	}
	var errs []error
	for _, c := range liveClusters() {
		errs = append(errs, c.close())
	}
	return errors.Join(errs...)
}

// NewDatabase creates a database with a unique name on the shared server,
// drops it (WITH (FORCE)) when the test ends, and returns its connection
// string. It skips or fails the test when no server is available, as the
// package documentation describes.
func NewDatabase(t testing.TB) string {
	t.Helper()
	base, admin, err := sharedServer()
	if err != nil {
		fail(t, err)
	}
	name, err := uniqueDatabaseName()
	if err != nil {
		t.Fatal(err)
	}
	connString, err := withDatabase(base, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := createDatabase(admin, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dropDatabase(admin, name); err != nil {
			t.Error(err)
		}
	})
	return connString
}

// NewPool returns a pool on a database made by NewDatabase. The pool is
// closed, then the database dropped, when the test ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	connString := NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), databaseTimeout)
	defer cancel()
	pool, err := pgxpool.New(ctx, connString)
	if err != nil {
		t.Fatalf("pgtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("pgtest: ping new database: %v", err)
	}
	return pool
}

// sharedServer resolves the shared server once per process and returns its
// connection string and an administrative pool on it.
func sharedServer() (string, *pgxpool.Pool, error) {
	shared.once.Do(func() {
		ctx := context.Background()
		srv, err := defaultResolver().resolve(ctx)
		if err != nil {
			shared.err = err
			return
		}
		cfg, err := pgxpool.ParseConfig(srv.url)
		if err != nil {
			shared.err = fmt.Errorf("pgtest: parse server connection string: %w", err)
			return
		}
		cfg.MaxConns = adminMaxConns
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			shared.err = fmt.Errorf("pgtest: open admin pool: %w", err)
			return
		}
		shared.url, shared.admin = srv.url, pool
	})
	return shared.url, shared.admin, shared.err
}

// fail skips or fails t for err, following the CI rule.
func fail(t testing.TB, err error) {
	t.Helper()
	if skip, msg := verdict(err, os.Getenv); skip {
		t.Skip(msg)
	} else {
		t.Fatal(msg)
	}
}

// uniqueDatabaseName returns DatabasePrefix followed by the process id, a
// per-process counter and random hex, e.g. idemtest_4242_7_9f3a11c2.
func uniqueDatabaseName() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("pgtest: random database name: %w", err)
	}
	return fmt.Sprintf("%s%d_%d_%s", DatabasePrefix, os.Getpid(), databaseSeq.Add(1), hex.EncodeToString(b[:])), nil
}

// execer is what createDatabase and dropDatabase need from a pool or a
// connection.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// createDatabase creates the database name through db.
func createDatabase(db execer, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), databaseTimeout)
	defer cancel()
	if _, err := db.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	return nil
}

// dropDatabase drops the database name through db, ending its sessions.
func dropDatabase(db execer, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), databaseTimeout)
	defer cancel()
	if _, err := db.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("pgtest: drop database %s: %w", name, err)
	}
	return nil
}

// withDatabase returns connString with its database replaced by name. It
// accepts URLs (postgres:// or postgresql://) and keyword/value strings.
func withDatabase(connString, name string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", fmt.Errorf("pgtest: parse server URL: %w", err)
		}
		u.Path, u.RawPath = "/"+name, ""
		return u.String(), nil
	}
	if strings.TrimSpace(connString) == "" {
		return "", errors.New("pgtest: empty server connection string")
	}
	quoted := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(name)
	return connString + " dbname='" + quoted + "'", nil
}
