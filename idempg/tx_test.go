package idempg_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

// conflicted asks a lease whether its transaction hit a conflict.
func conflicted(t testing.TB, l idemstore.Lease) bool {
	t.Helper()
	cr, ok := l.(idemstore.ConflictReporter)
	if !ok {
		t.Fatalf("the lease does not implement idemstore.ConflictReporter")
	}
	return cr.Conflicted()
}

// createDoctors creates the on-call table of the write-skew example: both
// doctors on call, and at least one must stay.
func createDoctors(t testing.TB, store *idempg.Store) {
	t.Helper()
	_, err := store.Pool().Exec(context.Background(), `
CREATE TABLE doctors (name text PRIMARY KEY, on_call boolean NOT NULL);
INSERT INTO doctors VALUES ('alice', true), ('bob', true)`)
	if err != nil {
		t.Fatalf("create doctors: %v", err)
	}
}

// TestConflictReporter runs two leases into a serialization failure and
// into a deadlock: exactly the one that failed reports the conflict, its
// Complete fails, and its writes roll back.
func TestConflictReporter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  *idempg.Config
		// run makes the two leases' transactions conflict. It returns the
		// errors of each lease's statements (nil if they all succeeded).
		run func(t *testing.T, store *idempg.Store, a, b context.Context) (errA, errB error)
	}{
		{
			// Write skew: both read two doctors on call, each takes one off.
			name: "SerializationFailure",
			cfg:  &idempg.Config{IsoLevel: pgx.Serializable},
			run: func(t *testing.T, store *idempg.Store, a, b context.Context) (error, error) {
				offCall := func(ctx context.Context, name string) error {
					tx, err := idempg.TxFromContext(ctx)
					if err != nil {
						return err
					}
					_, err = tx.Exec(ctx, `UPDATE doctors SET on_call = false WHERE name = $1`, name)
					return err
				}
				onCall := func(ctx context.Context) int {
					tx, err := idempg.TxFromContext(ctx)
					if err != nil {
						t.Fatalf("TxFromContext: %v", err)
					}
					var n int
					if err := tx.QueryRow(ctx, `SELECT count(*) FROM doctors WHERE on_call`).Scan(&n); err != nil {
						t.Fatalf("read doctors: %v", err)
					}
					return n
				}
				if onCall(a) != 2 || onCall(b) != 2 {
					t.Fatalf("both transactions must see two doctors on call")
				}
				return offCall(a, "alice"), offCall(b, "bob")
			},
		},
		{
			// Each holds one row and asks for the other's.
			name: "Deadlock",
			run: func(t *testing.T, store *idempg.Store, a, b context.Context) (error, error) {
				update := func(ctx context.Context, name string) error {
					tx, err := idempg.TxFromContext(ctx)
					if err != nil {
						return err
					}
					_, err = tx.Exec(ctx, `UPDATE doctors SET on_call = NOT on_call WHERE name = $1`, name)
					return err
				}
				if err := update(a, "alice"); err != nil {
					t.Fatalf("a's first update: %v", err)
				}
				if err := update(b, "bob"); err != nil {
					t.Fatalf("b's first update: %v", err)
				}
				errA := make(chan error, 1)
				go func() { errA <- update(a, "bob") }()
				waitBlocked(t, store.Pool(), backendPID(t, a))
				errB := update(b, "alice") // the server finds the cycle after deadlock_timeout
				return <-errA, errB
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := setup(t, tt.cfg)
			createDoctors(t, store)
			sa, sb := newScope("alice"), newScope("bob")
			la := mustLease(t, store, params(idem.ModeAtomic, sa, "a", epoch))
			lb := mustLease(t, store, params(idem.ModeAtomic, sb, "b", epoch))
			ctxA, ctxB := la.Context(context.Background()), lb.Context(context.Background())
			if err := write(ctxA, sa.Key); err != nil {
				t.Fatalf("a's business write: %v", err)
			}
			if err := write(ctxB, sb.Key); err != nil {
				t.Fatalf("b's business write: %v", err)
			}
			if conflicted(t, la) || conflicted(t, lb) {
				t.Fatalf("a lease reports a conflict before any")
			}
			errA, errB := tt.run(t, store, ctxA, ctxB)
			t.Logf("statement errors: a=%v b=%v", errA, errB)

			completeA := la.Complete(context.Background(), response("{}"))
			completeB := lb.Complete(context.Background(), response("{}"))
			outcomes := []struct {
				name      string
				lease     idemstore.Lease
				scope     idemstore.Scope
				stmtErr   error
				complete  error
				committed bool
			}{
				{"a", la, sa, errA, completeA, completeA == nil},
				{"b", lb, sb, errB, completeB, completeB == nil},
			}
			winners := 0
			for _, o := range outcomes {
				if o.committed {
					winners++
					if conflicted(t, o.lease) || o.stmtErr != nil {
						t.Errorf("%s committed but reports conflict %v, statement error %v", o.name, conflicted(t, o.lease), o.stmtErr)
					}
					if n := countRows(t, store, o.scope.Key); n != 1 {
						t.Errorf("%s committed %d business rows, want 1", o.name, n)
					}
					continue
				}
				if !conflicted(t, o.lease) {
					t.Errorf("%s failed (statement %v, complete %v) without reporting a conflict", o.name, o.stmtErr, o.complete)
				}
				if errors.Is(o.complete, idemstore.ErrLeaseLost) {
					t.Errorf("%s's Complete = %v; a conflict is not a lost lease", o.name, o.complete)
				}
				if n := countRows(t, store, o.scope.Key); n != 0 {
					t.Errorf("%s failed but committed %d business rows", o.name, n)
				}
				// The conflicted key is free for the rerun.
				complete(t, mustLease(t, store, params(idem.ModeAtomic, o.scope, "a", epoch)), "{}")
			}
			if winners != 1 {
				t.Errorf("%d transactions committed, want exactly 1", winners)
			}
		})
	}
}

// TestTwoPhaseTransaction checks the two-phase handler's transaction, whose
// BEGIN waits for its first statement: whatever that first statement is,
// it runs inside the transaction, which commits with the response or rolls
// back with the key.
func TestTwoPhaseTransaction(t *testing.T) {
	t.Parallel()
	insert := `INSERT INTO business (value) VALUES ($1)`
	tests := []struct {
		name string
		// use sends the handler's statements; key is the business value.
		use      func(ctx context.Context, tx pgx.Tx, key string) error
		complete bool // complete the lease; release it otherwise
		// wantComplete is whether Complete succeeds.
		wantComplete bool
		wantRows     int
		wantStatus   string
	}{
		{
			name: "FirstExecCommitsWithResponse",
			use: func(ctx context.Context, tx pgx.Tx, key string) error {
				_, err := tx.Exec(ctx, insert, key)
				return err
			},
			complete: true, wantComplete: true, wantRows: 1, wantStatus: "completed",
		},
		{
			name: "FirstExecRollsBackOnRelease",
			use: func(ctx context.Context, tx pgx.Tx, key string) error {
				_, err := tx.Exec(ctx, insert, key)
				return err
			},
		},
		{
			name: "FirstExecWithoutArguments",
			use: func(ctx context.Context, tx pgx.Tx, key string) error {
				// Several statements in one string: the simple protocol.
				_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO business (value) VALUES ('%[1]s'); INSERT INTO business (value) VALUES ('%[1]s')`, key))
				return err
			},
		},
		{
			name: "FirstExecWithExecMode",
			use: func(ctx context.Context, tx pgx.Tx, key string) error {
				_, err := tx.Exec(ctx, insert, pgx.QueryExecModeSimpleProtocol, key)
				return err
			},
		},
		{
			name: "FirstExecWithNamedArgs",
			use: func(ctx context.Context, tx pgx.Tx, key string) error {
				_, err := tx.Exec(ctx, `INSERT INTO business (value) VALUES (@value)`, pgx.NamedArgs{"value": key})
				return err
			},
			complete: true, wantComplete: true, wantRows: 1, wantStatus: "completed",
		},
		{
			name: "FirstQueryRow",
			use: func(ctx context.Context, tx pgx.Tx, key string) error {
				var id int64
				return tx.QueryRow(ctx, insert+` RETURNING id`, key).Scan(&id)
			},
		},
		{
			name: "FirstQuery",
			use: func(ctx context.Context, tx pgx.Tx, key string) error {
				rows, err := tx.Query(ctx, insert+` RETURNING id`, key)
				if err != nil {
					return err
				}
				rows.Close()
				return rows.Err()
			},
		},
		{
			name: "FirstSendBatch",
			use: func(ctx context.Context, tx pgx.Tx, key string) error {
				b := &pgx.Batch{}
				b.Queue(insert, key)
				return tx.SendBatch(ctx, b).Close()
			},
		},
		{
			name: "FirstSavepoint",
			use: func(ctx context.Context, tx pgx.Tx, key string) error {
				return pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
					_, err := sp.Exec(ctx, insert, key)
					return err
				})
			},
		},
		{
			name: "FirstThroughConn",
			use: func(ctx context.Context, tx pgx.Tx, key string) error {
				_, err := tx.Conn().Exec(ctx, insert, key)
				return err
			},
		},
		{
			name: "FailedFirstExecAbortsTransaction",
			use: func(ctx context.Context, tx pgx.Tx, key string) error {
				if _, err := tx.Exec(ctx, insert, nil); err == nil {
					return errors.New("inserting NULL succeeded")
				}
				_, err := tx.Exec(ctx, insert, key)
				if err == nil {
					return errors.New("a statement after a failed one succeeded; want the transaction aborted")
				}
				return nil
			},
			complete: true, wantStatus: "started",
		},
		{
			name:     "NoStatement",
			use:      func(context.Context, pgx.Tx, string) error { return nil },
			complete: true, wantComplete: true, wantStatus: "completed",
		},
	}
	store := setup(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			scope := newScope("alice")
			l := mustLease(t, store, params(idem.ModeTwoPhase, scope, "a", epoch))
			ctx, cancel := context.WithTimeout(l.Context(context.Background()), testTimeout)
			defer cancel()
			tx, err := idempg.TxFromContext(ctx)
			if err != nil {
				t.Fatalf("TxFromContext: %v", err)
			}
			if err := tt.use(ctx, tx, scope.Key); err != nil {
				t.Fatalf("handler statements: %v", err)
			}
			if tt.complete {
				err := l.Complete(ctx, response("{}"))
				if (err == nil) != tt.wantComplete {
					t.Errorf("Complete = %v, want success %v", err, tt.wantComplete)
				}
			} else if err := l.Release(ctx); err != nil {
				t.Errorf("Release: %v", err)
			}
			if n := countRows(t, store, scope.Key); n != tt.wantRows {
				t.Errorf("%d business rows, want %d", n, tt.wantRows)
			}
			if got := keyStatus(t, store, scope); got != tt.wantStatus {
				t.Errorf("key status %q, want %q", got, tt.wantStatus)
			}
			if _, err := tx.Exec(ctx, insert, scope.Key); !errors.Is(err, pgx.ErrTxClosed) {
				t.Errorf("a statement after the lease ended = %v, want pgx.ErrTxClosed", err)
			}
		})
	}
}

// TestTwoPhaseUnusedTransactionFreesConnection takes a two-phase handler's
// transaction without sending anything in it: completing or releasing the
// lease returns the connection to the pool.
func TestTwoPhaseUnusedTransactionFreesConnection(t *testing.T) {
	t.Parallel()
	store := setupOn(t, newPool(t, pgtest.NewDatabase(t), 2), nil)
	for _, finish := range []string{"Complete", "Release"} {
		t.Run(finish, func(t *testing.T) {
			scope := newScope("alice")
			l := mustLease(t, store, params(idem.ModeTwoPhase, scope, "a", epoch))
			ctx := l.Context(context.Background())
			if _, err := idempg.TxFromContext(ctx); err != nil {
				t.Fatalf("TxFromContext: %v", err)
			}
			if n := store.Pool().Stat().AcquiredConns(); n != 1 {
				t.Fatalf("%d connections acquired with the transaction taken, want 1", n)
			}
			var err error
			if finish == "Complete" {
				err = l.Complete(ctx, response("{}"))
			} else {
				err = l.Release(ctx)
			}
			if err != nil {
				t.Fatalf("%s: %v", finish, err)
			}
			if n := store.Pool().Stat().AcquiredConns(); n != 0 {
				t.Errorf("%d connections acquired after %s, want 0", n, finish)
			}
		})
	}
}

// TestConflictInFirstStatement fails a two-phase handler's first statement,
// sent together with BEGIN, with the SQLSTATEs of a conflict: the lease
// reports it.
func TestConflictInFirstStatement(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err := store.Pool().Exec(ctx, `CREATE FUNCTION fail_with(code text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'failing with %', code USING ERRCODE = code;
END
$$`)
	if err != nil {
		t.Fatalf("create function: %v", err)
	}
	tests := []struct {
		code         string
		wantConflict bool
	}{
		{"40001", true}, // serialization failure
		{"40P01", true}, // deadlock
		{"23505", false},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			l := mustLease(t, store, params(idem.ModeTwoPhase, newScope("alice"), "a", epoch))
			ctx = l.Context(ctx)
			tx, err := idempg.TxFromContext(ctx)
			if err != nil {
				t.Fatalf("TxFromContext: %v", err)
			}
			if _, err := tx.Exec(ctx, `SELECT fail_with($1)`, tt.code); err == nil {
				t.Fatalf("the failing statement succeeded")
			}
			if got := conflicted(t, l); got != tt.wantConflict {
				t.Errorf("Conflicted() = %v, want %v", got, tt.wantConflict)
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release: %v", err)
			}
		})
	}
}

// roundTrips counts round trips on the wire: the flushes that a
// connection's client sends, each followed by a wait for the server's
// answer. It sees what a tracer does not: the preparation of statements
// before a batch, and the deallocation of statements that pgx invalidated.
// It counts the statements run too: the Execute and Query messages sent.
type roundTrips struct{ n, statements atomic.Int64 }

// dial is a pgconn.DialFunc whose connections count their writes in r.
func (r *roundTrips) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: &r.n, statements: &r.statements}, nil
}

type countingConn struct {
	net.Conn
	n, statements *atomic.Int64
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.n.Add(1)
	c.statements.Add(executes(b))
	return c.Conn.Write(b)
}

// executes counts the Execute ('E') and simple Query ('Q') messages in b,
// a write of whole frontend messages: a type byte, then a length that
// counts itself. The start-up messages, which have no type byte, come
// before anything a test counts.
func executes(b []byte) int64 {
	var n int64
	for len(b) >= 5 {
		if b[0] == 'E' || b[0] == 'Q' {
			n++
		}
		size := int(binary.BigEndian.Uint32(b[1:5]))
		if size < 4 || size+1 > len(b) {
			break
		}
		b = b[1+size:]
	}
	return n
}

// TestRoundTrips counts the round trips of each step of a request: a new
// key costs three in both modes (claim, the handler's first statement with
// its BEGIN, Complete), a two-phase replay two, an atomic replay one; with
// a speculative atomic claim, as the middleware makes, a new key costs two
// (the claim goes out with the first statement) and a replay two (the
// refused claim, then the read of the key).
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	for _, pooling := range []bool{false, true} {
		t.Run(fmt.Sprintf("TransactionPooling=%v", pooling), func(t *testing.T) {
			t.Parallel()
			testRoundTrips(t, pgtest.NewDatabase(t), &idempg.Config{TransactionPooling: pooling})
		})
	}
	t.Run("NoAdvisoryLocks", func(t *testing.T) {
		t.Parallel()
		testRoundTrips(t, pgtest.NewDatabase(t), &idempg.Config{NoAdvisoryLocks: true})
	})
}

func testRoundTrips(t *testing.T, connString string, cfg *idempg.Config) {
	transactionPooling := cfg.TransactionPooling
	trips := &roundTrips{}
	pool := newPoolWith(t, connString, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 1 // one connection, whose statements the warm-up prepares
		cfg.ConnConfig.DialFunc = trips.dial
		// The count reads the protocol's messages off the socket: without
		// TLS, whatever the URL allows.
		cfg.ConnConfig.TLSConfig = nil
		cfg.ConnConfig.Fallbacks = nil
	})
	store := setupOn(t, pool, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	// count and request take the subtest's t: a subtest must not call its
	// parent's Fatalf.
	count := func(t *testing.T, step func() error) int64 {
		t.Helper()
		before := trips.n.Load()
		if err := step(); err != nil {
			t.Fatalf("step: %v", err)
		}
		return trips.n.Load() - before
	}
	// statements counts the statements that step runs, and its round trips.
	statements := func(t *testing.T, trips *roundTrips, step func() error) (stmts, rt int64) {
		t.Helper()
		before := trips.statements.Load()
		rt = count(t, step)
		return trips.statements.Load() - before, rt
	}
	// replayStatements is how many statements a replay runs: a completed
	// key answered by its claim is one primary-key read, in atomic mode.
	type steps struct{ claim, write, complete, replay, replayStatements int64 }
	request := func(t *testing.T, mode idem.Mode) (got steps) {
		scope := newScope("alice")
		var l idemstore.Lease
		got.claim = count(t, func() error {
			res, err := store.Claim(ctx, params(mode, scope, "a", epoch))
			l = res.Lease
			if err == nil && l == nil {
				err = errors.New("no lease")
			}
			return err
		})
		lctx := l.Context(ctx)
		got.write = count(t, func() error { return write(lctx, scope.Key) })
		got.complete = count(t, func() error { return l.Complete(ctx, response("{}")) })
		got.replayStatements, got.replay = statements(t, trips, func() error {
			res, err := store.Claim(ctx, params(mode, scope, "a", epoch.Add(time.Second)))
			if err == nil && (res.Record == nil || res.Record.Status != idemstore.StatusCompleted) {
				err = errors.New("no replay")
			}
			return err
		})
		return got
	}
	tests := []struct {
		mode idem.Mode
		want steps
	}{
		{idem.ModeTwoPhase, steps{claim: 1, write: 1, complete: 1, replay: 2, replayStatements: 2}},
		{idem.ModeAtomic, steps{claim: 1, write: 1, complete: 1, replay: 1, replayStatements: 1}},
	}
	if transactionPooling || cfg.NoAdvisoryLocks {
		// The claim reads the key, then opens the transaction with the
		// lock or the row.
		tests[1].want.claim = 2
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			request(t, tt.mode) // prepares the statements
			if got := request(t, tt.mode); got != tt.want {
				t.Errorf("round trips %+v, want %+v", got, tt.want)
			}
		})
	}

	if cfg.NoAdvisoryLocks {
		// A row claim of a key the middleware has not seen inserts first,
		// in the claim's transaction: one round trip for a new key, three
		// for a completed one (the insert that claims nothing, its
		// rollback, the read), which the middleware sends this way only
		// for a key it has not claimed itself lately.
		t.Run("atomic-speculative", func(t *testing.T) {
			type specSteps struct{ claim, replay int64 }
			specRequest := func(t *testing.T) (got specSteps) {
				scope := newScope("alice")
				p := params(idem.ModeAtomic, scope, "a", epoch)
				p.Speculative = true
				var l idemstore.Lease
				got.claim = count(t, func() error {
					res, err := store.Claim(ctx, p)
					if l = res.Lease; err == nil && l == nil {
						err = errors.New("no lease")
					}
					return err
				})
				if err := l.Complete(ctx, response("{}")); err != nil {
					t.Fatalf("Complete: %v", err)
				}
				p.Now = epoch.Add(time.Second)
				got.replay = count(t, func() error {
					res, err := store.Claim(ctx, p)
					if err == nil && (res.Record == nil || res.Record.Status != idemstore.StatusCompleted) {
						err = errors.New("no replay")
					}
					return err
				})
				return got
			}
			specRequest(t) // prepares the statements
			if got, want := specRequest(t), (specSteps{claim: 1, replay: 3}); got != want {
				t.Errorf("round trips %+v, want %+v", got, want)
			}
		})
		return
	}

	// A speculative claim (the middleware's, in atomic mode) sends nothing:
	// its claim goes out with the handler's first statement, or with
	// Complete or Release when the handler sends none.
	speculative := func(t *testing.T, scope idemstore.Scope, at time.Time, run func(l idemstore.Lease) error) int64 {
		t.Helper()
		p := params(idem.ModeAtomic, scope, "a", at)
		p.Speculative = true
		return count(t, func() error {
			res, err := store.Claim(ctx, p)
			if err == nil && res.Lease == nil {
				err = errors.New("no lease")
			}
			if err != nil {
				return err
			}
			return run(res.Lease)
		})
	}
	var exists *idemstore.ExistsError
	replay := func(err error) error {
		if !errors.As(err, &exists) || exists.Record.Status != idemstore.StatusCompleted {
			return fmt.Errorf("got %v, want the completed key", err)
		}
		return nil
	}
	type specSteps struct{ claim, write, complete, replay, quickNew, quickReplay, releaseNew int64 }
	specRequest := func(t *testing.T) (got specSteps) {
		scope := newScope("alice")
		var l idemstore.Lease
		got.claim = speculative(t, scope, epoch, func(lease idemstore.Lease) error { l = lease; return nil })
		lctx := l.Context(ctx)
		got.write = count(t, func() error { return write(lctx, scope.Key) })
		got.complete = count(t, func() error { return l.Complete(ctx, response("{}")) })
		got.replay = speculative(t, scope, epoch.Add(time.Second), func(l idemstore.Lease) error {
			if err := write(l.Context(ctx), scope.Key); !errors.Is(err, idempg.ErrNotClaimed) {
				return fmt.Errorf("write: %v, want ErrNotClaimed", err)
			}
			return replay(l.Release(ctx))
		})
		quick := newScope("alice")
		got.quickNew = speculative(t, quick, epoch, func(l idemstore.Lease) error { return l.Complete(ctx, response("{}")) })
		got.quickReplay = speculative(t, quick, epoch.Add(time.Second), func(l idemstore.Lease) error { return replay(l.Release(ctx)) })
		got.releaseNew = speculative(t, newScope("alice"), epoch, func(l idemstore.Lease) error { return l.Release(ctx) })
		return got
	}
	t.Run("atomic-speculative", func(t *testing.T) {
		specRequest(t) // prepares the statements
		want := specSteps{claim: 0, write: 1, complete: 1, replay: 2, quickNew: 1, quickReplay: 2, releaseNew: 1}
		if pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheDescribe {
			// Through a PgBouncer that cannot keep named statements: pgx
			// forgets the descriptions of a failed batch's statements, so a
			// new key whose statements a refused claim (a replay) sent on
			// the connection before pays one round trip to describe them
			// again. Each of these follows a replay.
			want.write, want.quickNew, want.releaseNew = 2, 2, 2
		}
		if got := specRequest(t); got != want {
			t.Errorf("round trips %+v, want %+v", got, want)
		}
	})
}
