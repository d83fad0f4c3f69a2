// Package mysqltest gives tests of the commands a MariaDB (or MySQL)
// database of their own: on the server that TEST_MYSQL_DSN names, else on
// 127.0.0.1:3306 (root, no password). A test without a server is skipped,
// or failed under CI=true. The throwaway server that idemmysql's own tests
// start when none answers is not started here.
package mysqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

var shared struct {
	once  sync.Once
	cfg   *mysql.Config
	admin *sql.DB
	err   error
}

func server() (*mysql.Config, *sql.DB, error) {
	shared.once.Do(func() {
		dsn := os.Getenv("TEST_MYSQL_DSN")
		if dsn == "" {
			dsn = "root@tcp(127.0.0.1:3306)/"
		}
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			shared.err = err
			return
		}
		db, err := sql.Open("mysql", dsn)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err = db.PingContext(ctx)
			cancel()
		}
		shared.cfg, shared.admin, shared.err = cfg, db, err
	})
	return shared.cfg, shared.admin, shared.err
}

// NewDatabase creates a database of t's own, dropped when t ends, and
// returns its mysql:// URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	cfg, admin, err := server()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no MySQL server (CI=true): %v", err)
		}
		t.Skipf("no MySQL server: %v", err)
	}
	var b [6]byte
	rand.Read(b[:])
	name := "idemtest_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		endSessions(t, admin, name)
		if _, err := admin.Exec("DROP DATABASE " + name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	user := cfg.User
	if cfg.Passwd != "" {
		user += ":" + cfg.Passwd
	}
	return "mysql://" + user + "@" + cfg.Addr + "/" + name
}

// endSessions kills the server's sessions on the database name. A process
// that a test killed may leave one behind, still waiting on a row lock
// (the server sees the client gone only when the statement ends), or a
// transaction open; DROP DATABASE would wait for its metadata lock for
// lock_wait_timeout, a year by default.
func endSessions(t testing.TB, admin *sql.DB, name string) {
	t.Helper()
	rows, err := admin.Query(`SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()`, name)
	if err != nil {
		t.Errorf("list the sessions on %s: %v", name, err)
		return
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err == nil {
			ids = append(ids, id)
		}
	}
	rows.Close()
	for _, id := range ids {
		admin.Exec(fmt.Sprintf("KILL %d", id)) // a session that ended meanwhile is no error of the test's
	}
}
