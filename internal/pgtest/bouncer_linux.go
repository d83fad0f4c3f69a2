package pgtest

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
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// bouncerBin is where Debian's pgbouncer package installs the binary.
const bouncerBin = "/usr/sbin/pgbouncer"

// StartBouncer starts PgBouncer with pool_mode = transaction in front of
// the server of connString (a postgres:// URL over TCP), on a free port of
// 127.0.0.1, for the life of t. It returns connString pointed at PgBouncer,
// with pgx's statement cache turned off (default_query_exec_mode =
// cache_describe): PgBouncer before 1.21 cannot keep a named prepared
// statement across transactions. Any database name connects to the
// database of that name on the server. Without the pgbouncer binary it
// skips t, or fails it when CI is true.
func StartBouncer(t testing.TB, connString string) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if !isExecutable(bouncerBin) {
			fail(t, &UnavailableError{Reasons: []string{"no pgbouncer binary (Debian: apt-get install pgbouncer)"}})
		}
		bin = bouncerBin
	}
	u, err := url.Parse(connString)
	if err != nil || u.Host == "" {
		t.Fatalf("pgtest: StartBouncer needs a postgres://host:port/db URL, got one that does not parse")
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
		fail(t, err)
	}
	base, err := tempBase(cred)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(base, "idem-pgbouncer-")
	if err != nil {
		t.Fatalf("pgtest: make the PgBouncer directory: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := chownTo(dir, cred); err != nil {
		t.Fatalf("pgtest: hand the PgBouncer directory over: %v", err)
	}
	listen, err := freePort()
	if err != nil {
		t.Fatal(err)
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
			t.Fatalf("pgtest: write %s: %v", filepath.Base(path), err)
		}
		if err := chownTo(path, cred); err != nil {
			t.Fatalf("pgtest: hand %s over: %v", filepath.Base(path), err)
		}
	}

	cmd := exec.Command(bin, ini)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := spawn(cmd); err != nil {
		t.Fatalf("pgtest: start pgbouncer: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT) // immediate shutdown
		select {
		case <-exited:
		case <-time.After(killTimeout):
			cmd.Process.Kill()
			<-exited
		}
	})

	q := u.Query()
	q.Set("default_query_exec_mode", "cache_describe")
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(listen))
	via := u.String()

	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, via)
		if err == nil {
			conn.Close(ctx)
			return via
		}
		select {
		case err := <-exited:
			t.Fatalf("pgtest: pgbouncer exited at start (%v)%s", err, bouncerLog(logPath))
		case <-ctx.Done():
			t.Fatalf("pgtest: pgbouncer did not accept connections within %s: %v%s", readyTimeout, err, bouncerLog(logPath))
		case <-time.After(readyPoll):
		}
	}
}

// bouncerLog returns the end of PgBouncer's log, prefixed by a line break.
func bouncerLog(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	return "\n" + tail(strings.TrimSpace(string(b)))
}
