package idemmysql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/idemmysql"
)

// The tests' server: the MariaDB (or MySQL) that envDSN names, else the one
// on 127.0.0.1:3306 (root, no password) when it answers, else a throwaway
// mariadbd started from the installed binaries in a temporary directory,
// stopped when the tests end. Under CI=true a server that cannot be had
// fails the tests instead of skipping them. Each test has a database of
// its own, created and dropped by newDatabase.
const (
	envDSN       = "TEST_MYSQL_DSN"
	envThrowaway = "TEST_MYSQL_THROWAWAY" // "1" skips the local server
	localDSN     = "root@tcp(127.0.0.1:3306)/"
)

var server struct {
	once  sync.Once
	dsn   string // with no database
	admin *sql.DB
	stop  func()
	err   error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if server.stop != nil {
		server.stop()
	}
	os.Exit(code)
}

// sharedServer returns the tests' server, starting it on first use.
func sharedServer() (string, *sql.DB, error) {
	server.once.Do(func() {
		if dsn := os.Getenv(envDSN); dsn != "" {
			server.dsn, server.admin, server.err = connect(dsn, 10*time.Second)
			return
		}
		if os.Getenv(envThrowaway) != "1" {
			if db, admin, err := connect(localDSN, 2*time.Second); err == nil {
				server.dsn, server.admin = db, admin
				return
			}
		}
		server.dsn, server.admin, server.stop, server.err = startThrowaway()
	})
	return server.dsn, server.admin, server.err
}

func connect(dsn string, timeout time.Duration) (string, *sql.DB, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return "", nil, err
	}
	return dsn, db, nil
}

// startThrowaway starts a mariadbd of its own on a free loopback port,
// with a data directory made by mariadb-install-db, and root without a
// password.
func startThrowaway() (dsn string, admin *sql.DB, stop func(), err error) {
	installDB, err1 := exec.LookPath("mariadb-install-db")
	mariadbd, err2 := exec.LookPath("mariadbd")
	if mariadbd == "" {
		if _, err := os.Stat("/usr/sbin/mariadbd"); err == nil {
			mariadbd, err2 = "/usr/sbin/mariadbd", nil
		}
	}
	if err := errors.Join(err1, err2); err != nil {
		return "", nil, nil, fmt.Errorf("no MariaDB server on 127.0.0.1:3306 and none to start: %w", err)
	}
	dir, err := os.MkdirTemp("", "idemmysql-test-")
	if err != nil {
		return "", nil, nil, err
	}
	data := filepath.Join(dir, "data")
	out, err := exec.Command(installDB, "--no-defaults", "--datadir="+data, "--user="+currentUser(),
		"--auth-root-authentication-method=normal", "--skip-test-db").CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, nil, fmt.Errorf("mariadb-install-db: %v: %s", err, out)
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, nil, err
	}
	log, err := os.Create(filepath.Join(dir, "mariadbd.log"))
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, nil, err
	}
	cmd := exec.Command(mariadbd, "--no-defaults", "--datadir="+data, "--user="+currentUser(),
		"--bind-address=127.0.0.1", "--port="+strconv.Itoa(port), "--socket="+filepath.Join(dir, "mysqld.sock"),
		"--pid-file="+filepath.Join(dir, "mysqld.pid"), "--skip-log-bin", "--innodb-buffer-pool-size=64M")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, nil, err
	}
	stop = func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.RemoveAll(dir)
	}
	dsn = fmt.Sprintf("root@tcp(127.0.0.1:%d)/", port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, admin, err = connect(dsn, 2*time.Second)
		if err == nil {
			return dsn, admin, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, nil, fmt.Errorf("throwaway mariadbd did not answer: %w", err)
		}
		time.Sleep(100 * time.Millisecond) // a poll of the server, not a synchronisation
	}
}

func currentUser() string {
	if os.Geteuid() == 0 {
		return "root"
	}
	return strconv.Itoa(os.Geteuid())
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// newDatabase creates a database of t's own, dropped when t ends, and
// returns its DSN.
func newDatabase(t testing.TB) string {
	t.Helper()
	base, admin, err := sharedServer()
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
		if _, err := admin.Exec("DROP DATABASE " + name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = name
	return cfg.FormatDSN()
}

// openUnmigrated opens a store on a new, empty database.
func openUnmigrated(t testing.TB) *idemmysql.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := idemmysql.Open(ctx, newDatabase(t), nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// openStore opens a migrated store on a new database.
func openStore(t testing.TB) *idemmysql.Store {
	t.Helper()
	store := openUnmigrated(t)
	if err := store.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return store
}
