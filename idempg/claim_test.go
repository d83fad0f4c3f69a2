package idempg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

// backendPID returns the server process of the lease's transaction.
func backendPID(t testing.TB, ctx context.Context) uint32 {
	t.Helper()
	tx, err := idempg.TxFromContext(ctx)
	if err != nil {
		t.Fatalf("TxFromContext: %v", err)
	}
	return tx.Conn().PgConn().PID()
}

// terminate ends a server process from another connection, as a crash of
// the process that holds it would, and waits until it is gone.
func terminate(t testing.TB, store *idempg.Store, pid uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var ok bool
	if err := store.Pool().QueryRow(ctx, `SELECT pg_terminate_backend($1, 5000)`, int32(pid)).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
	}
}

// waitBlocked waits until the server process pid waits for a lock. It polls
// the server's lock table, a bounded number of times.
func waitBlocked(t testing.TB, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for ctx.Err() == nil {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE pid = $1 AND NOT granted)`, int32(pid)).Scan(&waiting)
		if err != nil {
			t.Fatalf("read pg_locks: %v", err)
		}
		if waiting {
			return
		}
	}
	t.Fatalf("process %d never waited for a lock", pid)
}

// keyStatus returns the committed status of a key, "" when there is none.
func keyStatus(t testing.TB, store *idempg.Store, scope idemstore.Scope) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var status string
	err := store.Pool().QueryRow(ctx, `SELECT status FROM idempotency_keys WHERE client_id = $1 AND idempotency_key = $2`,
		scope.ClientID, scope.Key).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatalf("read key status: %v", err)
	}
	return status
}

// TestCrashBetweenClaimAndCommit kills the holder's server process after
// its business write and before Complete.
func TestCrashBetweenClaimAndCommit(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			scope := newScope("alice")
			l := mustLease(t, store, params(mode, scope, "a", epoch))
			ctx := l.Context(context.Background())
			if err := write(ctx, scope.Key); err != nil {
				t.Fatalf("business write: %v", err)
			}
			terminate(t, store, backendPID(t, ctx))

			err := l.Complete(context.Background(), response(`{"holder":"crashed"}`))
			if !errors.Is(err, idemstore.ErrUnavailable) {
				t.Fatalf("Complete after the crash = %v; want an error wrapping ErrUnavailable", err)
			}
			if n := countRows(t, store, scope.Key); n != 0 {
				t.Fatalf("%d business rows after the crash, want 0", n)
			}

			now := epoch.Add(time.Second)
			if mode == idem.ModeTwoPhase {
				// The committed claim outlives the holder until its lease expires.
				if rec := mustRecord(t, store, params(mode, scope, "a", now)); rec.Status != idemstore.StatusInFlight {
					t.Fatalf("status within the lease = %q, want started", rec.Status)
				}
				now = epoch.Add(lockTimeout + time.Second)
			}
			next := mustLease(t, store, params(mode, scope, "a", now))
			wantToken := int64(1)
			if mode == idem.ModeTwoPhase {
				wantToken = 2
			}
			if info := next.Info(); info.Token != wantToken || info.TakenOver != (mode == idem.ModeTwoPhase) {
				t.Errorf("Info() = %+v, want token %d, taken over %v", info, wantToken, mode == idem.ModeTwoPhase)
			}
			if err := write(next.Context(context.Background()), scope.Key); err != nil {
				t.Fatalf("new owner's write: %v", err)
			}
			complete(t, next, `{"holder":"next"}`)
			if n := countRows(t, store, scope.Key); n != 1 {
				t.Errorf("%d business rows after the new owner completed, want 1", n)
			}
		})
	}
}

// cancelRequestPool is a pool whose cancelled statements are cancelled on
// the server too, so a cancelled handler's transaction ends at once.
func cancelRequestPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return newPoolWith(t, pgtest.NewDatabase(t), func(cfg *pgxpool.Config) {
		cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 5 * time.Second}
		}
	})
}

// TestCancelledHandlerLeavesNothing cancels the handler's context while its
// second statement waits on the server.
func TestCancelledHandlerLeavesNothing(t *testing.T) {
	t.Parallel()
	pools := []struct {
		name string
		pool func(t testing.TB) *pgxpool.Pool
	}{
		// pgx's default closes the connection; the server ends the
		// transaction when it notices.
		{"ClosesConnection", func(t testing.TB) *pgxpool.Pool { return newPool(t, pgtest.NewDatabase(t), 4) }},
		// A cancel request stops the statement on the server at once.
		{"CancelsOnServer", cancelRequestPool},
	}
	for _, pc := range pools {
		for _, mode := range modes {
			t.Run(pc.name+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				store := setupOn(t, pc.pool(t), nil)
				scope := newScope("alice")
				gate := lockKeyOf(scope.Key)

				// The test holds a lock that the handler's second statement waits for.
				held, err := store.Pool().Acquire(context.Background())
				if err != nil {
					t.Fatalf("acquire: %v", err)
				}
				defer held.Release()
				if _, err := held.Exec(context.Background(), `SELECT pg_advisory_lock($1)`, gate); err != nil {
					t.Fatalf("take the gate: %v", err)
				}
				defer held.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, gate)

				l := mustLease(t, store, params(mode, scope, "a", epoch))
				ctx, cancel := context.WithCancel(l.Context(context.Background()))
				defer cancel()
				if err := write(ctx, scope.Key); err != nil {
					t.Fatalf("first business write: %v", err)
				}
				pid := backendPID(t, ctx)
				blocked := make(chan error, 1)
				go func() {
					tx, err := idempg.TxFromContext(ctx)
					if err == nil {
						_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, gate)
					}
					blocked <- err
				}()
				waitBlocked(t, store.Pool(), pid)
				cancel()
				if err := <-blocked; err == nil {
					t.Fatalf("the handler's statement succeeded after its context was cancelled")
				}

				if err := l.Complete(context.Background(), response("{}")); err == nil {
					t.Fatalf("Complete after a cancelled statement succeeded; want an error")
				}
				if n := countRows(t, store, scope.Key); n != 0 {
					t.Errorf("%d business rows, want 0: the first write must roll back", n)
				}
				wantStatus := ""
				if mode == idem.ModeTwoPhase {
					wantStatus = "started" // taken over after the lock timeout, as after a crash
				}
				if got := keyStatus(t, store, scope); got != wantStatus {
					t.Errorf("committed key status %q, want %q", got, wantStatus)
				}
				if pc.name == "CancelsOnServer" && mode == idem.ModeAtomic {
					// The transaction ended with the cancelled statement, and
					// the key is free as soon as its session has let go of the
					// key's lock: on a busy machine pgx may have given up on
					// the cancel and closed the connection, which the server
					// notices a little later. Poll, with a generous deadline.
					deadline := time.Now().Add(testTimeout)
					for {
						res := claim(t, store, params(mode, scope, "a", epoch.Add(time.Second)))
						if res.Lease != nil {
							complete(t, res.Lease, "{}")
							break
						}
						if time.Now().After(deadline) {
							t.Fatalf("the key is still %q %s after the cancelled handler", res.Record.Status, testTimeout)
						}
						time.Sleep(10 * time.Millisecond)
					}
				}
			})
		}
	}
}

// lockKeyOf is an advisory lock number for a test's own gate.
func lockKeyOf(s string) int64 {
	h := hashOf("gate:" + s)
	var n int64
	for _, b := range h[:8] {
		n = n<<8 | int64(b)
	}
	return n
}

// TestStaleHolderCannotCommitAfterTakeover lets a holder write, lose its
// lease to a takeover, and try to commit before and after the new owner.
func TestStaleHolderCannotCommitAfterTakeover(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	for _, order := range []string{"StaleFirst", "NewOwnerFirst"} {
		t.Run(order, func(t *testing.T) {
			t.Parallel()
			scope := newScope("alice")
			stale := mustLease(t, store, params(idem.ModeTwoPhase, scope, "a", epoch))
			if err := write(stale.Context(context.Background()), scope.Key); err != nil {
				t.Fatalf("stale holder's write: %v", err)
			}
			owner := mustLease(t, store, params(idem.ModeTwoPhase, scope, "a", epoch.Add(lockTimeout+time.Second)))
			if info := owner.Info(); !info.TakenOver || info.Token != 2 {
				t.Fatalf("takeover Info() = %+v, want token 2, taken over", info)
			}
			if err := write(owner.Context(context.Background()), scope.Key); err != nil {
				t.Fatalf("new owner's write: %v", err)
			}
			staleComplete := func() {
				err := stale.Complete(context.Background(), response(`{"holder":"stale"}`))
				if !errors.Is(err, idemstore.ErrLeaseLost) {
					t.Errorf("stale holder's Complete = %v, want ErrLeaseLost", err)
				}
			}
			if order == "StaleFirst" {
				staleComplete()
				complete(t, owner, `{"holder":"new"}`)
			} else {
				complete(t, owner, `{"holder":"new"}`)
				staleComplete()
			}
			if n := countRows(t, store, scope.Key); n != 1 {
				t.Errorf("%d business rows, want exactly 1 (the new owner's)", n)
			}
			rec := mustRecord(t, store, params(idem.ModeTwoPhase, scope, "a", epoch.Add(lockTimeout+2*time.Second)))
			if string(rec.Response.Body) != `{"holder":"new"}` || rec.Token != 2 {
				t.Errorf("stored %q with token %d, want the new owner's response and token 2", rec.Response.Body, rec.Token)
			}
		})
	}
}

// TestInFlightAnswerDoesNotWait sends duplicate claims, one after another
// and from several goroutines at once, while a holder keeps its key: every
// one must answer "started" while the holder still holds it. The holder
// finishes only after every duplicate has answered, so a claim that waited
// for the holder would never answer and would fail at its deadline. It
// asserts no latency; BenchmarkInFlightAnswer measures that.
func TestInFlightAnswerDoesNotWait(t *testing.T) {
	t.Parallel()
	const (
		sequential = 20
		workers    = 4
		perWorker  = 10
	)
	store := setup(t, nil)
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			scope := newScope("alice")
			finish := holdKey(t, store, mode, scope)
			defer finish()

			var answered atomic.Int64
			dup := func() {
				if bad := duplicateClaim(store, mode, scope); bad != "" {
					t.Errorf("a duplicate claim was not answered started: %s", bad)
					return
				}
				answered.Add(1)
			}
			for range sequential {
				dup()
			}
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for range perWorker {
						dup()
					}
				})
			}
			wg.Wait()
			if n := answered.Load(); n != sequential+workers*perWorker {
				t.Errorf("%d duplicate claims answered started, want %d", n, sequential+workers*perWorker)
			}
		})
	}
}

// holdKey claims scope's key in mode, writes a business row in the lease
// and keeps the lease until the returned function completes it.
func holdKey(t testing.TB, store *idempg.Store, mode idem.Mode, scope idemstore.Scope) (finish func()) {
	t.Helper()
	l := mustLease(t, store, params(mode, scope, "a", epoch))
	if err := write(l.Context(context.Background()), scope.Key); err != nil {
		t.Fatalf("holder's write: %v", err)
	}
	return func() {
		if err := l.Complete(context.Background(), response("{}")); err != nil {
			t.Errorf("holder's Complete: %v", err)
		}
	}
}

// duplicateClaim claims scope's key while its holder keeps it and returns
// what was wrong with the answer, or "" when it was "started".
func duplicateClaim(store *idempg.Store, mode idem.Mode, scope idemstore.Scope) string {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	res, err := store.Claim(ctx, params(mode, scope, "a", epoch.Add(time.Second)))
	switch {
	case err != nil:
		return err.Error()
	case res.Lease != nil:
		res.Lease.Release(context.Background())
		return "got a lease"
	case res.Record.Status != idemstore.StatusInFlight:
		return "status " + string(res.Record.Status)
	}
	return ""
}

// warmUp opens n connections of pool, so that a measurement does not
// include connection set-up.
func warmUp(t testing.TB, pool *pgxpool.Pool, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var conns []*pgxpool.Conn
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatalf("warm up the pool: %v", err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

// TestClaimUnavailable checks the answers when the pool cannot give a
// connection in time, and when the server cannot be reached.
func TestClaimUnavailable(t *testing.T) {
	t.Parallel()
	t.Run("PoolExhausted", func(t *testing.T) {
		t.Parallel()
		const acquireTimeout = 100 * time.Millisecond
		pool := newPool(t, pgtest.NewDatabase(t), 1)
		// The connection is opened first: on a loaded machine opening one
		// can take longer than the acquire timeout, which would fail the
		// migration rather than the claim under test.
		warmUp(t, pool, 1)
		store := setupOn(t, pool, &idempg.Config{AcquireTimeout: acquireTimeout})
		// An atomic holder keeps the only connection.
		holder := mustLease(t, store, params(idem.ModeAtomic, newScope("alice"), "a", epoch))
		defer holder.Release(context.Background())
		start := time.Now()
		_, err := store.Claim(context.Background(), params(idem.ModeAtomic, newScope("alice"), "b", epoch))
		elapsed := time.Since(start)
		if !errors.Is(err, idemstore.ErrUnavailable) {
			t.Fatalf("Claim with no free connection = %v; want an error wrapping ErrUnavailable", err)
		}
		// A timer never fires early, so this bound holds on any machine; how
		// much later the claim gave up depends on the machine and is not
		// checked.
		if elapsed < acquireTimeout {
			t.Errorf("Claim failed after %s, before the acquire timeout %s", elapsed, acquireTimeout)
		}
	})
	t.Run("ServerUnreachable", func(t *testing.T) {
		t.Parallel()
		// Nothing listens on port 1 of the loopback address.
		store, err := idempg.New(newPool(t, "postgres://postgres@127.0.0.1:1/none?connect_timeout=2", 1), nil)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		_, err = store.Claim(context.Background(), params(idem.ModeAtomic, newScope("alice"), "a", epoch))
		if !errors.Is(err, idemstore.ErrUnavailable) {
			t.Errorf("Claim without a server = %v; want an error wrapping ErrUnavailable", err)
		}
	})
	t.Run("CancelledWhileWaiting", func(t *testing.T) {
		t.Parallel()
		store := setupOn(t, newPool(t, pgtest.NewDatabase(t), 1), &idempg.Config{AcquireTimeout: testTimeout})
		holder := mustLease(t, store, params(idem.ModeAtomic, newScope("alice"), "a", epoch))
		defer holder.Release(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := store.Claim(ctx, params(idem.ModeAtomic, newScope("alice"), "b", epoch))
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, idemstore.ErrUnavailable) {
			t.Errorf("Claim whose context expired = %v; want the context's error, not ErrUnavailable", err)
		}
	})
}

// TestExpiredKeyReplacementKeepsFence replaces a key past retention while
// an ancient two-phase holder of it is still alive.
func TestExpiredKeyReplacementKeepsFence(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	scope := newScope("alice")
	ancient := mustLease(t, store, params(idem.ModeTwoPhase, scope, "a", epoch))
	later := epoch.Add(retention + time.Second)
	fresh := mustLease(t, store, params(idem.ModeTwoPhase, scope, "b", later))
	if info := fresh.Info(); info.TakenOver || info.Token != 2 {
		t.Errorf("replacement Info() = %+v, want token 2 (growing), not taken over", info)
	}
	if err := ancient.Complete(context.Background(), response(`{"holder":"ancient"}`)); !errors.Is(err, idemstore.ErrLeaseLost) {
		t.Errorf("the replaced holder's Complete = %v, want ErrLeaseLost", err)
	}
	complete(t, fresh, `{"holder":"fresh"}`)
	rec := mustRecord(t, store, params(idem.ModeTwoPhase, scope, "b", later.Add(time.Second)))
	if string(rec.Response.Body) != `{"holder":"fresh"}` {
		t.Errorf("stored %q, want the fresh holder's response", rec.Response.Body)
	}
}

// TestLeaseEnds checks what a lease and its transaction refuse.
func TestLeaseEnds(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			scope := newScope("alice")
			l := mustLease(t, store, params(mode, scope, "a", epoch))
			ctx := l.Context(context.Background())
			tx, err := idempg.TxFromContext(ctx)
			if err != nil {
				t.Fatalf("TxFromContext: %v", err)
			}
			if err := tx.Commit(ctx); !errors.Is(err, idempg.ErrTxManaged) {
				t.Errorf("Commit of the lease's transaction = %v, want ErrTxManaged", err)
			}
			if err := tx.Rollback(ctx); !errors.Is(err, idempg.ErrTxManaged) {
				t.Errorf("Rollback of the lease's transaction = %v, want ErrTxManaged", err)
			}
			// Savepoints work: the inner write commits with the lease.
			err = pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
				_, err := sp.Exec(ctx, `INSERT INTO business (value) VALUES ($1)`, scope.Key)
				return err
			})
			if err != nil {
				t.Fatalf("savepoint: %v", err)
			}
			// A failed savepoint rolls back alone.
			_ = pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
				if _, err := sp.Exec(ctx, `INSERT INTO business (value) VALUES ($1)`, scope.Key); err != nil {
					return err
				}
				return errors.New("changed my mind")
			})
			complete(t, l, "{}")
			if n := countRows(t, store, scope.Key); n != 1 {
				t.Errorf("%d business rows, want 1", n)
			}
			if _, err := idempg.TxFromContext(ctx); !errors.Is(err, idempg.ErrLeaseEnded) {
				t.Errorf("TxFromContext after Complete = %v, want ErrLeaseEnded", err)
			}
			if _, err := tx.Exec(ctx, `SELECT 1`); !errors.Is(err, pgx.ErrTxClosed) {
				t.Errorf("a statement on the ended transaction = %v, want pgx.ErrTxClosed", err)
			}
			if err := l.Complete(context.Background(), response("{}")); !errors.Is(err, idempg.ErrLeaseEnded) {
				t.Errorf("second Complete = %v, want ErrLeaseEnded", err)
			}
			if err := l.Release(context.Background()); !errors.Is(err, idempg.ErrLeaseEnded) {
				t.Errorf("Release after Complete = %v, want ErrLeaseEnded", err)
			}
		})
	}
}

// TestClaimTx claims keys inside the caller's own transaction.
func TestClaimTx(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	begin := func(t *testing.T) pgx.Tx {
		t.Helper()
		tx, err := store.Pool().Begin(context.Background())
		if err != nil {
			t.Fatalf("Begin: %v", err)
		}
		t.Cleanup(func() { tx.Rollback(context.Background()) })
		return tx
	}
	claimTx := func(t *testing.T, tx pgx.Tx, p idemstore.ClaimParams) idemstore.ClaimResult {
		t.Helper()
		res, err := store.ClaimTx(context.Background(), tx, p)
		if err != nil {
			t.Fatalf("ClaimTx: %v", err)
		}
		return res
	}
	callerWrite := func(t *testing.T, tx pgx.Tx, value string) {
		t.Helper()
		if _, err := tx.Exec(context.Background(), `INSERT INTO business (value) VALUES ($1)`, value); err != nil {
			t.Fatalf("caller's write: %v", err)
		}
	}
	// claimAfterWork opens the caller's transaction, writes in it, claims
	// the key there and writes through the lease.
	claimAfterWork := func(t *testing.T, scope idemstore.Scope) (pgx.Tx, idemstore.Lease) {
		t.Helper()
		tx := begin(t)
		callerWrite(t, tx, scope.Key+"-caller")
		res := claimTx(t, tx, params(idem.ModeAtomic, scope, "a", epoch))
		if res.Lease == nil {
			t.Fatalf("ClaimTx returned a record; want a lease")
		}
		if err := write(res.Lease.Context(context.Background()), scope.Key); err != nil {
			t.Fatalf("write through the lease: %v", err)
		}
		return tx, res.Lease
	}

	t.Run("CompleteCommitsWithCaller", func(t *testing.T) {
		t.Parallel()
		scope := newScope("alice")
		tx, lease := claimAfterWork(t, scope)
		// Until the caller commits, the key is in flight to everyone else.
		if rec := mustRecord(t, store, params(idem.ModeAtomic, scope, "a", epoch)); rec.Status != idemstore.StatusInFlight {
			t.Errorf("status seen outside before Complete = %q, want started", rec.Status)
		}
		complete(t, lease, `{"ok":true}`)
		if rec := mustRecord(t, store, params(idem.ModeAtomic, scope, "a", epoch)); rec.Status != idemstore.StatusInFlight {
			t.Errorf("status seen outside before the caller commits = %q, want started", rec.Status)
		}
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatalf("caller's Commit: %v", err)
		}
		rec := mustRecord(t, store, params(idem.ModeAtomic, scope, "a", epoch.Add(time.Second)))
		if rec.Status != idemstore.StatusCompleted || string(rec.Response.Body) != `{"ok":true}` {
			t.Errorf("after the caller's commit: %q %q, want the completed response", rec.Status, rec.Response.Body)
		}
		if a, b := countRows(t, store, scope.Key+"-caller"), countRows(t, store, scope.Key); a != 1 || b != 1 {
			t.Errorf("caller's rows %d, lease's rows %d; want 1 and 1", a, b)
		}
	})

	t.Run("ReleaseKeepsCallersWork", func(t *testing.T) {
		t.Parallel()
		scope := newScope("alice")
		tx, lease := claimAfterWork(t, scope)
		if err := lease.Release(context.Background()); err != nil {
			t.Fatalf("Release: %v", err)
		}
		// The caller's transaction goes on, and the key is free for it.
		again := claimTx(t, tx, params(idem.ModeAtomic, scope, "b", epoch))
		if again.Lease == nil {
			t.Fatalf("ClaimTx after Release returned a record; want a lease")
		}
		complete(t, again.Lease, `{"second":true}`)
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatalf("caller's Commit: %v", err)
		}
		if a, b := countRows(t, store, scope.Key+"-caller"), countRows(t, store, scope.Key); a != 1 || b != 0 {
			t.Errorf("caller's rows %d, released lease's rows %d; want 1 and 0", a, b)
		}
	})

	t.Run("ReplaysCompletedKey", func(t *testing.T) {
		t.Parallel()
		scope := newScope("alice")
		complete(t, mustLease(t, store, params(idem.ModeAtomic, scope, "a", epoch)), `{"first":true}`)
		tx := begin(t)
		res := claimTx(t, tx, params(idem.ModeAtomic, scope, "a", epoch.Add(time.Second)))
		if res.Record == nil || res.Record.Status != idemstore.StatusCompleted || string(res.Record.Response.Body) != `{"first":true}` {
			t.Fatalf("ClaimTx of a completed key = %+v; want the completed record", res)
		}
		// The caller's transaction is still usable.
		callerWrite(t, tx, scope.Key)
	})

	t.Run("RollbackFreesKey", func(t *testing.T) {
		t.Parallel()
		scope := newScope("alice")
		tx := begin(t)
		if res := claimTx(t, tx, params(idem.ModeAtomic, scope, "a", epoch)); res.Lease == nil {
			t.Fatalf("ClaimTx returned a record; want a lease")
		}
		if err := tx.Rollback(context.Background()); err != nil {
			t.Fatalf("caller's Rollback: %v", err)
		}
		complete(t, mustLease(t, store, params(idem.ModeAtomic, scope, "a", epoch)), "{}")
	})

	t.Run("RejectsTwoPhase", func(t *testing.T) {
		t.Parallel()
		tx := begin(t)
		if _, err := store.ClaimTx(context.Background(), tx, params(idem.ModeTwoPhase, newScope("alice"), "a", epoch)); err == nil {
			t.Errorf("ClaimTx in two-phase mode succeeded; want an error")
		}
	})
}

// TestConcurrentClaimsAcrossStores elects one owner among claims from
// several stores, as from several processes, in both modes.
func TestConcurrentClaimsAcrossStores(t *testing.T) {
	t.Parallel()
	connString := pgtest.NewDatabase(t)
	first := setupOn(t, newPool(t, connString, 4), nil)
	stores := []*idempg.Store{first}
	for range 3 {
		s, err := idempg.New(newPool(t, connString, 4), nil)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		stores = append(stores, s)
	}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			scope := newScope("alice")
			const perStore = 8
			start := make(chan struct{})
			results := make(chan idemstore.ClaimResult, perStore*len(stores))
			var wg sync.WaitGroup
			for _, s := range stores {
				for range perStore {
					wg.Go(func() {
						<-start
						ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
						defer cancel()
						res, err := s.Claim(ctx, params(mode, scope, "a", epoch))
						if err != nil {
							t.Errorf("Claim: %v", err)
							return
						}
						results <- res
					})
				}
			}
			close(start)
			wg.Wait()
			close(results)
			var owners []idemstore.Lease
			for res := range results {
				if res.Lease != nil {
					owners = append(owners, res.Lease)
				} else if res.Record.Status != idemstore.StatusInFlight {
					t.Errorf("a losing claim saw status %q, want started", res.Record.Status)
				}
			}
			if len(owners) != 1 {
				t.Fatalf("%d owners, want 1", len(owners))
			}
			if err := write(owners[0].Context(context.Background()), scope.Key); err != nil {
				t.Fatalf("owner's write: %v", err)
			}
			complete(t, owners[0], fmt.Sprintf(`{"mode":%q}`, mode))
			if n := countRows(t, first, scope.Key); n != 1 {
				t.Errorf("%d business rows, want 1", n)
			}
		})
	}
}

// TestTwoPhaseClaimOfLockedRow claims, in two-phase mode, a completed key
// whose row another transaction is deleting, as the purge does: the claim's
// insert waits for that transaction at most the claim lock timeout, then
// the claim reads the key and answers with the stored response.
func TestTwoPhaseClaimOfLockedRow(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	scope := newScope("alice")
	complete(t, mustLease(t, store, params(idem.ModeTwoPhase, scope, "a", epoch)), `{"id":"pay_1"}`)

	deleter, err := store.Pool().Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer deleter.Rollback(context.Background())
	if _, err := deleter.Exec(ctx, `DELETE FROM idempotency_keys WHERE client_id = $1 AND idempotency_key = $2`, scope.ClientID, scope.Key); err != nil {
		t.Fatalf("delete: %v", err)
	}
	rec := mustRecord(t, store, params(idem.ModeTwoPhase, scope, "a", epoch.Add(time.Second)))
	if rec.Status != idemstore.StatusCompleted || string(rec.Response.Body) != `{"id":"pay_1"}` {
		t.Errorf("record status %q, body %q; want the completed response", rec.Status, rec.Response.Body)
	}
}

// TestReleaseAfterFailedCompleteFreesTwoPhaseKey: a two-phase claim is
// committed, so when its response cannot be stored the middleware releases
// it, and the client's retry owns the key at once instead of waiting for
// the lease to run out.
func TestReleaseAfterFailedCompleteFreesTwoPhaseKey(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	scope := newScope("alice")
	l := mustLease(t, store, params(idem.ModeTwoPhase, scope, "a", epoch))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	err := l.Complete(cancelled, response("{}"))
	if err == nil || errors.Is(err, idemstore.ErrLeaseLost) {
		t.Fatalf("Complete with a cancelled context = %v, want a failure other than ErrLeaseLost", err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release after the failed Complete: %v", err)
	}
	retry := mustLease(t, store, params(idem.ModeTwoPhase, scope, "a", epoch.Add(time.Second)))
	complete(t, retry, `{"retry":true}`)
}

// advisoryLocks counts the advisory locks held in the database of pool.
func advisoryLocks(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n)
	if err != nil {
		t.Fatalf("read pg_locks: %v", err)
	}
	return n
}

// TestAtomicLeaseNeverKeepsItsLock ends atomic leases, which hold their key
// by a session-level advisory lock on a pooled connection, in every way
// they can end, on a pool of one connection: a connection that went back to
// the pool still holding a key's lock would let the next claim of that key,
// on the same session, take the lock again and run the request twice.
func TestAtomicLeaseNeverKeepsItsLock(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	store := setupOn(t, newPool(t, url, 1), nil)
	admin := newPool(t, url, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*testTimeout)
	defer cancel()

	tests := []struct {
		name string
		// end ends the lease; replay is whether the key is then completed.
		end    func(t *testing.T, l idemstore.Lease, scope idemstore.Scope) (replay bool)
		writes int // business rows that must remain
	}{
		{"CompleteAfterWrite", func(t *testing.T, l idemstore.Lease, scope idemstore.Scope) bool {
			if err := write(l.Context(ctx), scope.Key); err != nil {
				t.Fatalf("write: %v", err)
			}
			complete(t, l, "{}")
			return true
		}, 1},
		{"CompleteWithoutTransaction", func(t *testing.T, l idemstore.Lease, scope idemstore.Scope) bool {
			complete(t, l, "{}")
			return true
		}, 0},
		{"ReleaseAfterWrite", func(t *testing.T, l idemstore.Lease, scope idemstore.Scope) bool {
			if err := write(l.Context(ctx), scope.Key); err != nil {
				t.Fatalf("write: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			return false
		}, 0},
		{"ReleaseWithoutTransaction", func(t *testing.T, l idemstore.Lease, scope idemstore.Scope) bool {
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			return false
		}, 0},
		{"ReleaseAbortedTransaction", func(t *testing.T, l idemstore.Lease, scope idemstore.Scope) bool {
			tx, err := idempg.TxFromContext(l.Context(ctx))
			if err != nil {
				t.Fatalf("TxFromContext: %v", err)
			}
			if _, err := tx.Exec(ctx, `SELECT 1 / $1::int`, 0); err == nil {
				t.Fatalf("division by zero succeeded")
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			return false
		}, 0},
		{"CompleteFailsAtTheFence", func(t *testing.T, l idemstore.Lease, scope idemstore.Scope) bool {
			if err := write(l.Context(ctx), scope.Key); err != nil {
				t.Fatalf("write: %v", err)
			}
			// Another holder's completed row, as if two transactions reached
			// the end with the same key: the unique key fences this one out.
			if _, err := admin.Exec(ctx, `INSERT INTO idempotency_keys
    (client_id, idempotency_key, request_method, request_path, request_hash, status, lease_token,
     response_status, response_headers, response_body, created_at, locked_at, completed_at)
VALUES ($1, $2, 'POST', '/v1/payments', $3, 'completed', 7, 201, '{}', '{}', $4, $4, $4)`,
				scope.ClientID, scope.Key, hashOf("a"), epoch); err != nil {
				t.Fatalf("insert the other holder's row: %v", err)
			}
			if err := l.Complete(ctx, response(`{"holder":"fenced"}`)); !errors.Is(err, idemstore.ErrLeaseLost) {
				t.Fatalf("Complete = %v, want an error wrapping ErrLeaseLost", err)
			}
			return true
		}, 0},
		{"CompleteAfterCancelledStatement", func(t *testing.T, l idemstore.Lease, scope idemstore.Scope) bool {
			hctx, cancel := context.WithCancel(l.Context(ctx))
			tx, err := idempg.TxFromContext(hctx)
			if err != nil {
				t.Fatalf("TxFromContext: %v", err)
			}
			go func() { time.Sleep(50 * time.Millisecond); cancel() }()
			if _, err := tx.Exec(hctx, `SELECT pg_sleep($1::float8)`, 1.0); err == nil {
				t.Fatalf("a cancelled statement succeeded")
			}
			if err := l.Complete(ctx, response("{}")); err == nil {
				t.Fatalf("Complete after a cancelled statement succeeded")
			}
			return false
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scope := newScope("alice")
			l := mustLease(t, store, params(idem.ModeAtomic, scope, "a", epoch))
			// A failed check must not keep the pool's only connection.
			defer l.Release(context.Background())
			if n := advisoryLocks(t, admin); n != 1 {
				t.Fatalf("%d advisory locks while the lease holds its key, want 1", n)
			}
			replay := tt.end(t, l, scope)
			// A connection that pgx closed on cancellation leaves its server
			// process running the statement until it ends; the lock goes
			// with the process.
			deadline := time.Now().Add(testTimeout)
			for advisoryLocks(t, admin) != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("advisory locks remain %s after the lease ended", testTimeout)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if n := countRows(t, store, scope.Key); n != tt.writes {
				t.Errorf("%d business rows, want %d", n, tt.writes)
			}
			// The next claim of the key runs on the same pooled connection.
			res := claim(t, store, params(idem.ModeAtomic, scope, "a", epoch.Add(time.Second)))
			switch {
			case replay && (res.Record == nil || res.Record.Status != idemstore.StatusCompleted):
				t.Fatalf("next claim = %+v, want the completed record", res)
			case !replay && res.Lease == nil:
				t.Fatalf("next claim = %+v, want a lease: the key must be free", res)
			case !replay:
				if err := res.Lease.Release(ctx); err != nil {
					t.Fatalf("Release: %v", err)
				}
			}
			if n := advisoryLocks(t, admin); n != 0 {
				t.Fatalf("%d advisory locks at the end, want 0", n)
			}
		})
	}
}

// TestTransactionPoolingKeepsLockInTransaction checks where an atomic
// lease's lock lives: by default on the session, with no transaction open
// until the handler's first statement; with Config.TransactionPooling inside
// the open transaction, where a pooler in transaction mode keeps it.
func TestTransactionPoolingKeepsLockInTransaction(t *testing.T) {
	t.Parallel()
	for _, pooling := range []bool{false, true} {
		t.Run(fmt.Sprintf("TransactionPooling=%v", pooling), func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewDatabase(t)
			store := setupOn(t, newPool(t, url, 2), &idempg.Config{TransactionPooling: pooling})
			admin := newPool(t, url, 1)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			scope := newScope("alice")
			l := mustLease(t, store, params(idem.ModeAtomic, scope, "a", epoch))
			defer l.Release(context.Background())

			var state string
			err := admin.QueryRow(ctx, `SELECT a.state FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&state)
			if err != nil {
				t.Fatalf("find the holder of the key's lock: %v", err)
			}
			want := "idle"
			if pooling {
				want = "idle in transaction"
			}
			if state != want {
				t.Errorf("the lock's holder is %q, want %q", state, want)
			}
			if err := write(l.Context(ctx), scope.Key); err != nil {
				t.Fatalf("write: %v", err)
			}
			complete(t, l, "{}")
			if n := advisoryLocks(t, admin); n != 0 {
				t.Errorf("%d advisory locks after Complete, want 0", n)
			}
		})
	}
}

// TestClaimBoundsRowLockWait: a claim whose key row another transaction
// holds locked, without the key's advisory lock (as an operator's UPDATE
// does), waits for it no longer than ClaimLockTimeout and answers that the
// key is in flight. The locker stays open until the claim has answered, so
// a claim that waited for it would hang to the test's deadline.
func TestClaimBoundsRowLockWait(t *testing.T) {
	t.Parallel()
	store := setup(t, &idempg.Config{ClaimLockTimeout: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			scope := newScope("alice")
			first := mustLease(t, store, params(idem.ModeTwoPhase, scope, "a", epoch))
			_ = first // a started key, whose lease stays held
			locker, err := store.Pool().Begin(ctx)
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			defer func() { _ = locker.Rollback(context.Background()) }()
			if _, err := locker.Exec(ctx, `UPDATE idempotency_keys SET locked_at = locked_at WHERE client_id = $1 AND idempotency_key = $2`, scope.ClientID, scope.Key); err != nil {
				t.Fatalf("lock the row: %v", err)
			}
			rec := mustRecord(t, store, params(mode, scope, "a", epoch.Add(time.Second)))
			if rec.Status != idemstore.StatusInFlight {
				t.Errorf("claim of a locked key: status %q, want in flight", rec.Status)
			}
		})
	}
}
