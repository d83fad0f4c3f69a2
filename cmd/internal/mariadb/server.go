// Package mariadb runs a throwaway MariaDB server for the tools that kill
// and restart their database (idem chaos): mariadb-install-db in a
// temporary directory, then mariadbd on a free port of 127.0.0.1, root
// without a password, never the machine's own server. The server dies with
// the process that started it.
package mariadb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/internal/child"
)

// readyTimeout bounds a start, crash recovery included.
const readyTimeout = 2 * time.Minute

// Server is a throwaway mariadbd. It keeps its port and data directory for
// its whole life.
type Server struct {
	bin, dir, data string
	port           int

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// binaries finds mariadb-install-db and mariadbd.
func binaries() (installDB, mariadbd string, err error) {
	installDB, err1 := exec.LookPath("mariadb-install-db")
	mariadbd, err2 := exec.LookPath("mariadbd")
	if err2 != nil {
		for _, p := range []string{"/usr/sbin/mariadbd", "/usr/libexec/mariadbd"} {
			if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
				mariadbd, err2 = p, nil
				break
			}
		}
	}
	if err := errors.Join(err1, err2); err != nil {
		return "", "", fmt.Errorf("mariadb: the MariaDB server binaries are not installed (Debian: apt-get install mariadb-server): %w", err)
	}
	return installDB, mariadbd, nil
}

// Available returns nil when the machine can run a throwaway server.
func Available() error {
	_, _, err := binaries()
	return err
}

// New makes a data directory in a new temporary directory and starts the
// server on it.
func New(ctx context.Context) (_ *Server, err error) {
	installDB, mariadbd, err := binaries()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "idem-mariadb-")
	if err != nil {
		return nil, fmt.Errorf("mariadb: %w", err)
	}
	s := &Server{bin: mariadbd, dir: dir, data: filepath.Join(dir, "data")}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	out, err := exec.CommandContext(ctx, installDB, "--no-defaults", "--datadir="+s.data, "--user="+user(),
		"--auth-root-authentication-method=normal", "--skip-test-db").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("mariadb: mariadb-install-db: %v: %s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("mariadb: pick a free port: %w", err)
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func user() string {
	if os.Geteuid() == 0 {
		return "root"
	}
	return strconv.Itoa(os.Geteuid())
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// DSN returns the driver's DSN of database on the server.
func (s *Server) DSN(database string) string {
	c := mysql.NewConfig()
	c.User, c.Net, c.Addr, c.DBName = "root", "tcp", s.Addr(), database
	return c.FormatDSN()
}

// Start starts the server (again) on its port and data directory, and
// waits until it answers: after a Crash, InnoDB recovers first.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("mariadb: the server is running")
	}
	log, err := os.OpenFile(filepath.Join(s.dir, "mariadbd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("mariadb: %w", err)
	}
	defer log.Close()
	cmd := exec.Command(s.bin, "--no-defaults", "--datadir="+s.data, "--user="+user(),
		"--bind-address=127.0.0.1", "--port="+strconv.Itoa(s.port),
		"--socket="+filepath.Join(s.dir, "mysqld.sock"), "--pid-file="+filepath.Join(s.dir, "mysqld.pid"),
		"--skip-log-bin", "--innodb-buffer-pool-size=64M", "--max-connections=1000",
		"--skip-name-resolve")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = procAttr()
	if err := child.Start(cmd); err != nil {
		return fmt.Errorf("mariadb: start mariadbd: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	db, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		return fmt.Errorf("mariadb: %w", err)
	}
	defer db.Close()
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		err := db.PingContext(pctx)
		pcancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("mariadb: mariadbd exited at start: %s", s.logTail())
		case <-ctx.Done():
			return fmt.Errorf("mariadb: mariadbd did not answer within %s: %v", readyTimeout, err)
		case <-time.After(100 * time.Millisecond): // a poll of the server
		}
	}
}

// Crash kills the server with SIGKILL, as a machine that loses power
// would: no shutdown, InnoDB recovers from its redo log at the next Start.
func (s *Server) Crash() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("mariadb: the server is not running")
	}
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
	return nil
}

// CreateDatabase creates the database name and returns its mysql:// URL.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	db, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		return "", fmt.Errorf("mariadb: %w", err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("mariadb: create database %s: %w", name, err)
	}
	return "mysql://root@" + s.Addr() + "/" + name, nil
}

// Close kills the server and removes its directory. It may be called more
// than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.cmd != nil {
		s.cmd.Process.Kill()
		<-s.exited
		s.cmd = nil
	}
	s.mu.Unlock()
	return os.RemoveAll(s.dir)
}

// logTail is the end of the server's log, for an error.
func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "mariadbd.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-10):], "\n")
}
