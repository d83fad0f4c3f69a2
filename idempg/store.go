package idempg

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/deadline"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of [Config].
const (
	// AcquireTimeoutDefault is the default of [Config.AcquireTimeout].
	AcquireTimeoutDefault = 2 * time.Second
	// ClaimLockTimeoutDefault is the default of [Config.ClaimLockTimeout].
	ClaimLockTimeoutDefault = 100 * time.Millisecond
	// LeaderLeaseDefault is the default of [Config.LeaderLease].
	LeaderLeaseDefault = 30 * time.Second
)

// Config configures a [Store].
type Config struct {
	// AcquireTimeout bounds the wait for a connection from the pool, in
	// Claim, in the first TxFromContext of a two-phase handler, and in
	// Release. When it passes, the call fails with an error wrapping
	// idemstore.ErrUnavailable, which the middleware answers with 503. Defaults
	// to AcquireTimeoutDefault (2 s).
	AcquireTimeout time.Duration

	// ClaimLockTimeout is the lock_timeout of the claim's statements. The
	// claim never waits for another request's key (it uses an advisory lock
	// that it tries without waiting); this guards the rare row lock held by
	// a statement that does not take that lock, such as the purge or a
	// response being stored at that very moment. A claim that runs into it
	// is answered as a key in flight. With NoAdvisoryLocks the row is the
	// claim's only lock: a duplicate of a key in flight waits for it this
	// long, then is answered as a key in flight. Defaults to
	// ClaimLockTimeoutDefault (100 ms).
	ClaimLockTimeout time.Duration

	// IsoLevel is the isolation level of the transactions that run
	// handlers: the claim's transaction in idem.ModeAtomic, the handler's in
	// idem.ModeTwoPhase. With pgx.Serializable or pgx.RepeatableRead a
	// handler's transaction may fail with a serialization failure, which
	// the lease reports through idemstore.ConflictReporter so that the middleware
	// runs the request again. Defaults to "", the server's
	// default_transaction_isolation (read committed unless configured).
	IsoLevel pgx.TxIsoLevel

	// TransactionPooling must be set when the pool's connections go through
	// a pooler in transaction mode, such as PgBouncer with pool_mode =
	// transaction, which may run each transaction of a client on another
	// server connection. Atomic claims then hold the key by a
	// transaction-scoped lock inside the handler's transaction, at one round
	// trip more per new key, instead of by a session-level lock that spans
	// the claim, the handler's transaction and the unlock and would be left
	// on whichever server connection ran the claim. Direct connections and
	// poolers in session mode need nothing. Defaults to false.
	TransactionPooling bool

	// NoAdvisoryLocks makes the store use none of PostgreSQL's advisory
	// lock functions (pg_advisory_*, pg_try_advisory_*), for databases that
	// lack them or do not span nodes with them (CockroachDB, YugabyteDB,
	// Aurora DSQL, Citus) and for roles refused them. Every claim is then a
	// row claim: INSERT ... ON CONFLICT and row locks under
	// ClaimLockTimeout, in the claim's transaction, fenced by the row's
	// token and created_at as always; a duplicate of a key in flight waits
	// at most ClaimLockTimeout for the holder's row before it is answered
	// 409. Atomic claims are never deferred (idemstore.ClaimParams.Speculative
	// is ignored) and cost one round trip more per new key. The purge and
	// the resumer's leader (LockPurge, TryLead) hold a lease row in
	// idem_leader_leases (migration 009) for LeaderLease, renewed while
	// held, and migrations serialize on a lock of their version table. See
	// docs/scale-out.md. Defaults to false.
	NoAdvisoryLocks bool

	// LeaderLease is how long a leader's lease row lasts without renewal,
	// with NoAdvisoryLocks: an instance that dies holding the purge or the
	// resumer's lead leaves it to another after at most this long. The
	// holder renews it at a third of it. Defaults to LeaderLeaseDefault
	// (30 s).
	LeaderLease time.Duration

	// Logger receives migration notices. Defaults to slog.Default().
	Logger *slog.Logger
}

func (c *Config) withDefaults() *Config {
	out := Config{}
	if c != nil {
		out = *c
	}
	if out.AcquireTimeout == 0 {
		out.AcquireTimeout = AcquireTimeoutDefault
	}
	if out.ClaimLockTimeout == 0 {
		out.ClaimLockTimeout = ClaimLockTimeoutDefault
	}
	if out.LeaderLease == 0 {
		out.LeaderLease = LeaderLeaseDefault
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out
}

func (c *Config) validate() error {
	if c.AcquireTimeout < 0 || c.ClaimLockTimeout < 0 {
		return errors.New("idempg: Config.AcquireTimeout and Config.ClaimLockTimeout must not be negative")
	}
	if c.LeaderLease < time.Second {
		return fmt.Errorf("idempg: Config.LeaderLease (%s) must be at least 1s", c.LeaderLease)
	}
	if c.ClaimLockTimeout < time.Millisecond {
		return fmt.Errorf("idempg: Config.ClaimLockTimeout (%s) must be at least 1ms", c.ClaimLockTimeout)
	}
	switch c.IsoLevel {
	case "", pgx.Serializable, pgx.RepeatableRead, pgx.ReadCommitted:
	default:
		return fmt.Errorf("idempg: unsupported Config.IsoLevel %q", c.IsoLevel)
	}
	return nil
}

var _ idemstore.Store = (*Store)(nil)

// Store is an [idemstore.Store] in PostgreSQL. The key table lives in the
// application's database, so a handler's business writes and the stored
// response commit in one transaction; take it with [TxFromContext].
//
// A Store is safe for concurrent use. It does not own the pool.
type Store struct {
	pool *pgxpool.Pool
	cfg  *Config

	// claimLockTimeout is cfg.ClaimLockTimeout as a lock_timeout value.
	claimLockTimeout string
	// prepareClaims: the pool's connections run pgx's default
	// QueryExecModeCacheStatement, under which sendClaim prepares a
	// deferred claim's statements first.
	prepareClaims bool
	// typedArgs: pgx learns the parameters' types from the server in the
	// pool's query mode, so the hot statements send the argument types of
	// arg.go, which it encodes without allocating.
	typedArgs bool
	// deferredClaims is deferredClaims(cfg).
	deferredClaims bool
	// acquires bounds each wait for a connection by cfg.AcquireTimeout,
	// without a timer of its own (see package deadline).
	acquires *deadline.Queue

	// testHooks are set by the package's tests only.
	testHooks testHooks
}

// testHooks let tests reproduce interleavings that real traffic makes only
// by chance.
type testHooks struct {
	// sessionClaimQuery replaces querySessionClaim when not empty: a test
	// makes the statement wait between its read of the key and its lock.
	sessionClaimQuery string
}

// New returns a store on pool. It does not apply migrations; call
// [Store.Migrate].
//
// Size the pool for the handlers in flight: in idem.ModeAtomic every request
// holds a connection from its claim until its response is stored.
func New(pool *pgxpool.Pool, cfg *Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("idempg: a pool is required")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	mode := pool.Config().ConnConfig.DefaultQueryExecMode
	return &Store{
		pool:             pool,
		cfg:              c,
		claimLockTimeout: fmt.Sprintf("%dms", c.ClaimLockTimeout.Milliseconds()),
		prepareClaims:    mode == pgx.QueryExecModeCacheStatement,
		typedArgs:        typedArgs(mode),
		deferredClaims:   deferredClaims(c),
		acquires:         deadline.NewQueue(c.AcquireTimeout),
	}, nil
}

// Pool returns the store's pool, for work outside handlers. Inside a
// handler use [TxFromContext].
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// acquire takes a connection from the pool, waiting at most
// Config.AcquireTimeout.
func (s *Store) acquire(ctx context.Context, op string) (*pgxpool.Conn, error) {
	actx := s.acquires.WithTimeout(ctx)
	conn, err := s.pool.Acquire(actx)
	actx.Stop() // not deferred: a call that panicked leaves its context queued
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("idempg: %s: no connection within %s: %w", op, s.cfg.AcquireTimeout, idemstore.ErrUnavailable)
		}
		return nil, wrapErr(ctx, op, err)
	}
	return conn, nil
}

// lockKey is the advisory lock of a scope: the first 8 bytes of a SHA-256
// digest of the client and the key, length-prefixed so that no two scopes
// share an encoding. Distinct scopes collide with probability 2^-64; a
// collision only makes one claim answer "in flight" while the other runs.
//
// The digest's input is assembled in a buffer on the stack (a longer scope
// spills to the heap), so that a claim allocates nothing for it; the
// digest is that of the same bytes as ever, and instances of different
// versions take the same lock for a scope.
func lockKey(scope idemstore.Scope) int64 {
	var buf [128]byte
	b := append(buf[:0], "idem-lock-v1"...)
	b = binary.AppendUvarint(b, uint64(len(scope.ClientID)))
	b = append(b, scope.ClientID...)
	b = append(b, scope.Key...)
	sum := sha256.Sum256(b)
	return int64(binary.BigEndian.Uint64(sum[:8]))
}
