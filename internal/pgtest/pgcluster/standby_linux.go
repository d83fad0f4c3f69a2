package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// standbyTimeout bounds a base backup, a promotion and the wait for a
// replica.
const standbyTimeout = 2 * time.Minute

// NewStandby makes a streaming replica of c in a new temporary directory:
// a base backup of c's data (pg_basebackup -R, which writes the standby's
// primary_conninfo), started on a port of its own. via is the host:port
// at which the standby reaches c, such as a proxy that delays the stream;
// "" is c's own address. It is a Cluster like any other, closed by its
// own Close; Promote makes it a primary. c must be running.
func (c *Cluster) NewStandby(ctx context.Context, via string) (_ *Cluster, err error) {
	host, port := "127.0.0.1", strconv.Itoa(c.port)
	if via != "" {
		if host, port, err = net.SplitHostPort(via); err != nil {
			return nil, fmt.Errorf("pgcluster: standby via %q: %w", via, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, standbyTimeout)
	defer cancel()
	base, err := tempBase(c.cred)
	if err != nil {
		return nil, err
	}
	dir, lock, err := makeClusterDir(base, c.cred)
	if err != nil {
		return nil, err
	}
	s := &Cluster{
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		sockDir: filepath.Join(dir, "sock"),
		logPath: filepath.Join(dir, "postgres.log"),
		bin:     c.bin,
		cred:    c.cred,
		lock:    lock,
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close())
		}
	}()
	if err := s.mkdirOwned(s.sockDir); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "pg_basebackup"),
		"-D", s.dataDir, "-h", host, "-p", port, "-U", "postgres",
		"-R", "-X", "stream", "--checkpoint=fast", "--no-sync")
	cmd.Dir = s.dir
	cmd.Env = serverEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgcluster: pg_basebackup: %w\n%s", err, tail(string(out)))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for attempt := 1; ; attempt++ {
		if s.port, err = freePort(); err != nil {
			return nil, err
		}
		err = s.start(ctx)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortInUse) || attempt == portAttempts {
			return nil, err
		}
	}
}

// Promote ends a standby's recovery and waits until it accepts writes: it
// is a primary from then on.
func (c *Cluster) Promote(ctx context.Context) error {
	return c.exec(ctx, "promote", "SELECT pg_promote(true, 60)")
}

// SetSynchronous makes every commit on c wait until a standby has flushed
// it (synchronous_standby_names = '*', synchronous_commit = on), or, with
// on false, commits wait for no standby. It takes effect at once, for the
// sessions that are open too.
func (c *Cluster) SetSynchronous(ctx context.Context, on bool) error {
	names := "''"
	if on {
		names = "'*'"
	}
	if err := c.exec(ctx, "set synchronous_standby_names", "ALTER SYSTEM SET synchronous_standby_names = "+names); err != nil {
		return err
	}
	return c.exec(ctx, "reload the configuration", "SELECT pg_reload_conf()")
}

// WaitStandby waits until a standby streams from c, and with sync, until it
// is the synchronous one that commits wait for.
func (c *Cluster) WaitStandby(ctx context.Context, sync bool) error {
	ctx, cancel := context.WithTimeout(ctx, standbyTimeout)
	defer cancel()
	q := "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
	if sync {
		q += " AND sync_state = 'sync'"
	}
	for {
		var n int
		err := c.query(ctx, q, &n)
		if err == nil && n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: no standby streaming after %s (last error: %v)", standbyTimeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// exec runs one statement on c's postgres database.
func (c *Cluster) exec(ctx context.Context, what, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, standbyTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgcluster: %s: %w%s", what, err, c.logTail())
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("pgcluster: %s: %w", what, err)
	}
	return nil
}

// query scans the one row of sql on c's postgres database into dst.
func (c *Cluster) query(ctx context.Context, sql string, dst ...any) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql).Scan(dst...)
}
