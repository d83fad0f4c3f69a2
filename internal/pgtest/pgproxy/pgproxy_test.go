package pgproxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/internal/pgtest/pgproxy"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const testTimeout = 30 * time.Second

// TestCutCommit commits a row through the proxy with the cut before and
// after the COMMIT, by the simple protocol, by a prepared statement and in
// a pipelined batch, and checks what the server did once the session is
// gone: the row is there after an After cut and absent after a Before cut,
// while the client got an error either way.
func TestCutCommit(t *testing.T) {
	t.Parallel()
	direct := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	admin, err := pgx.Connect(ctx, direct)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, `CREATE TABLE t (id text PRIMARY KEY)`); err != nil {
		t.Fatalf("create table: %v", err)
	}
	proxy, viaProxy, err := pgproxy.StartFor(direct)
	if err != nil {
		t.Fatalf("StartFor: %v", err)
	}
	defer proxy.Close()

	commits := map[string]func(ctx context.Context, conn *pgx.Conn, id string) error{
		"Simple": func(ctx context.Context, conn *pgx.Conn, id string) error {
			tx, err := conn.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO t VALUES ($1)`, id); err != nil {
				return err
			}
			return tx.Commit(ctx)
		},
		"Batch": func(ctx context.Context, conn *pgx.Conn, id string) error {
			b := &pgx.Batch{}
			b.Queue(`BEGIN`)
			b.Queue(`INSERT INTO t VALUES ($1)`, id)
			b.Queue(`COMMIT`)
			return conn.SendBatch(ctx, b).Close()
		},
	}
	for name, commit := range commits {
		for _, when := range []pgproxy.When{pgproxy.After, pgproxy.Before} {
			id := name + map[pgproxy.When]string{pgproxy.After: "-after", pgproxy.Before: "-before"}[when]
			conn, err := pgx.Connect(ctx, viaProxy)
			if err != nil {
				t.Fatalf("connect through the proxy: %v", err)
			}
			// Run once uncut, so that the batch's statements are prepared
			// and the cut falls on an Execute of a named statement.
			if err := commit(ctx, conn, id+"-warm"); err != nil {
				t.Fatalf("%s: uncut commit: %v", id, err)
			}
			pid := conn.PgConn().PID()
			proxy.CutNext(pgproxy.IsCommit, when)
			if err := commit(ctx, conn, id); err == nil {
				t.Errorf("%s: commit through a cut connection succeeded", id)
			}
			conn.Close(context.Background())
			waitGone(t, admin, pid)
			var n int
			if err := admin.QueryRow(ctx, `SELECT count(*) FROM t WHERE id = $1`, id).Scan(&n); err != nil {
				t.Fatalf("count: %v", err)
			}
			if want := map[pgproxy.When]int{pgproxy.After: 1, pgproxy.Before: 0}[when]; n != want {
				t.Errorf("%s: %d rows after the cut, want %d", id, n, want)
			}
		}
	}
	if proxy.Cuts() != 4 || proxy.Armed() != 0 {
		t.Errorf("%d cuts, %d still armed; want 4 and 0", proxy.Cuts(), proxy.Armed())
	}
}

// waitGone polls until the server session pid has ended.
func waitGone(t *testing.T, admin *pgx.Conn, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		var n int
		err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, int32(pid)).Scan(&n)
		if err != nil {
			t.Fatalf("read pg_stat_activity: %v", err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %d still runs %s after the cut", pid, testTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestIsCommit(t *testing.T) {
	for sql, want := range map[string]bool{
		"COMMIT": true, "commit": true, " Commit ; ": true, "END": true, "COMMIT WORK": true,
		"COMMIT PREPARED 'x'": false, "ROLLBACK": false, "SELECT 'COMMIT'": false, "": false,
	} {
		if got := pgproxy.IsCommit(sql); got != want {
			t.Errorf("IsCommit(%q) = %v, want %v", sql, got, want)
		}
	}
}
