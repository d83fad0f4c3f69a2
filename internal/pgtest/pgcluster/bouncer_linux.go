package pgcluster

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/child"
)

// bouncerBin is where Debian's pgbouncer package installs the binary.
const bouncerBin = "/usr/sbin/pgbouncer"

// Bouncer is a PgBouncer process in front of a PostgreSQL server.
type Bouncer struct {
	cmd    *exec.Cmd
	exited chan error
	dir    string
	once   sync.Once
}

// StartBouncer starts PgBouncer with pool_mode = transaction in front of
// the server of connString (a postgres:// URL over TCP), on a free port of
// 127.0.0.1. It returns connString pointed at PgBouncer, with pgx's
// statement cache turned off (default_query_exec_mode = cache_describe):
// PgBouncer before 1.21 cannot keep a named prepared statement across
// transactions. Any database name connects to the database of that name on
// the server. Without the pgbouncer binary its error is an
// *UnavailableError.
func StartBouncer(ctx context.Context, connString string) (_ *Bouncer, via string, err error) {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if !isExecutable(bouncerBin) {
			return nil, "", &UnavailableError{Reasons: []string{"no pgbouncer binary (Debian: apt-get install pgbouncer)"}}
		}
		bin = bouncerBin
	}
	u, err := url.Parse(connString)
	if err != nil || u.Host == "" {
		return nil, "", fmt.Errorf("pgcluster: StartBouncer needs a postgres://host:port/db URL, got one that does not parse")
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "5432"
	}
	user := u.User.Username()
	if user == "" {
		user = "postgres"
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, "", err
	}
	base, err := tempBase(cred)
	if err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp(base, "idem-pgbouncer-")
	if err != nil {
		return nil, "", fmt.Errorf("pgcluster: make the PgBouncer directory: %w", err)
	}
	b := &Bouncer{dir: dir}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	if err := chownTo(dir, cred); err != nil {
		return nil, "", fmt.Errorf("pgcluster: hand the PgBouncer directory over: %w", err)
	}
	listen, err := freePort()
	if err != nil {
		return nil, "", err
	}
	ini := filepath.Join(dir, "pgbouncer.ini")
	logPath := filepath.Join(dir, "pgbouncer.log")
	files := map[string]string{
		ini: fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = %s
log_connections = 0
log_disconnections = 0
`, host, port, listen, filepath.Join(dir, "userlist.txt"), logPath),
		filepath.Join(dir, "userlist.txt"): strconv.Quote(user) + ` ""` + "\n",
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return nil, "", fmt.Errorf("pgcluster: write %s: %w", filepath.Base(path), err)
		}
		if err := chownTo(path, cred); err != nil {
			return nil, "", fmt.Errorf("pgcluster: hand %s over: %w", filepath.Base(path), err)
		}
	}

	cmd := exec.Command(bin, ini)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := child.Start(cmd); err != nil {
		return nil, "", fmt.Errorf("pgcluster: start pgbouncer: %w", err)
	}
	b.cmd, b.exited = cmd, make(chan error, 1)
	go func() { b.exited <- cmd.Wait() }()

	q := u.Query()
	q.Set("default_query_exec_mode", "cache_describe")
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(listen))
	via = u.String()

	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, via)
		if err == nil {
			conn.Close(ctx)
			return b, via, nil
		}
		select {
		case werr := <-b.exited:
			b.exited <- werr
			return nil, "", fmt.Errorf("pgcluster: pgbouncer exited at start (%v)%s", werr, bouncerLog(logPath))
		case <-ctx.Done():
			return nil, "", fmt.Errorf("pgcluster: pgbouncer did not accept connections within %s: %v%s", readyTimeout, err, bouncerLog(logPath))
		case <-time.After(readyPoll):
		}
	}
}

// Close stops PgBouncer (an immediate shutdown) and removes its directory.
// It may be called more than once.
func (b *Bouncer) Close() error {
	b.once.Do(func() {
		if b.cmd != nil {
			b.cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-b.exited:
			case <-time.After(killTimeout):
				b.cmd.Process.Kill()
				<-b.exited
			}
		}
		os.RemoveAll(b.dir)
	})
	return nil
}

// bouncerLog returns the end of PgBouncer's log, prefixed by a line break.
func bouncerLog(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	return "\n" + tail(strings.TrimSpace(string(b)))
}
