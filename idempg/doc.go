// Package idempg is an idemstore.Store in PostgreSQL, on a pgx v5 pool.
//
// The key table, idempotency_keys, lives in the application's own database,
// so that a handler's business writes and the stored response commit in one
// transaction: the handler takes it with [TxFromContext]. The schema comes
// from embedded, versioned SQL files applied by [Store.Migrate]. The store
// also keeps an outbox (idemoutbox) and webhook watermarks
// ([Store.AdvanceWatermark], for idemwebhook.Newest) in the lease's
// transaction.
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	...
//	store, err := idempg.New(pool, nil)
//	...
//	if err := store.Migrate(ctx); err != nil { ... }
//	mw, err := idem.New(store, &idem.Config{ClientID: clientOf})
//	mux.Handle("POST /v1/payments", mw.Wrap(createPayment))
//
//	func createPayment(w http.ResponseWriter, r *http.Request) {
//		tx, err := idempg.TxFromContext(r.Context())
//		...
//		_, err = tx.Exec(r.Context(), `INSERT INTO payments ...`)
//		...
//	}
//
// # Round trips
//
// This section is the one account of what each claim sends; the code's
// comments point here. Each way of holding a key is a type of its own, in
// the file that each paragraph names: its claim, Complete, Release and, for
// a two-phase lease, its recovery points.
//
// The middleware's atomic claim at READ COMMITTED (the default) is
// deferred (lease_deferred.go): it asks for it with
// idemstore.ClaimParams.Speculative, and Claim takes a pooled connection and
// returns a lease without any round trip.
// The claim goes out in front of the handler's first statement, in one
// round trip with one Sync: idem_claim_guard (migrations 004 and 005),
// which takes the key's transaction-scoped advisory lock without waiting
// and then reads the key, with a snapshot taken after the lock, then
// BEGIN, then the statement. In the extended protocol the statements
// before a Sync run in one implicit transaction, which BEGIN turns into an
// explicit one: the lock stays, and the transaction stays open for the
// handler. If the lock is taken (a request in flight) or the key exists and
// is not past retention, the guard raises SQLSTATE IDEM2 or IDEM3: the
// server skips the rest up to the Sync, BEGIN and the handler's statement
// included, and rolls back, which frees the lock and leaves the connection
// clean. The handler's statement never ran, so it never waited on a row the
// holder locked; it fails with an error wrapping [ErrNotClaimed], and so
// does every later one. Complete and Release then return an error wrapping
// an *idemstore.ExistsError that carries the key, and the middleware answers
// from it: the replay, 409 or 422, never the handler's own response. A key
// in flight needs nothing more for its 409; a key that exists is read on
// the same connection, a second round trip, so that a new key, the common
// case, does not carry a read it would not use. A handler that answers
// without any statement has the claim sent by Complete, in the round trip
// that inserts the completed row and commits, or by Release, alone, to
// learn whether the key is held or exists. A new key costs two round
// trips: the claim with BEGIN and the handler's first statement, then
// Complete, which inserts the completed row and commits, which frees the
// lock. A speculative replay costs two, a 409 one; the middleware claims a
// key it claimed lately at once (below), where a replay costs one.
// Complete's insert fails on the unique key if a request that did not take
// the lock stored the key meanwhile: the unique key stays the final fence.
//
// So the code of an atomic handler before its first statement can run for
// a request that is then answered from the key, and its result is
// discarded: atomic handlers must have no effects outside the transaction.
// A handler that must do something else first, such as charge a card with
// a key from idem.DeriveKey, calls [ClaimKey], which sends the claim with
// BEGIN at once, one round trip more for a new key. The deferred claim
// holds the key by a transaction-scoped lock, so it works behind a pooler
// in transaction mode too (Config.TransactionPooling). Its guard's fresh
// snapshot needs READ COMMITTED in the round trip's implicit transaction:
// the server's default_transaction_isolation, as below. pgx forgets the
// cached statements of a batch that failed, which every refused claim is;
// so the claim's batches are sent with their statements prepared by their
// text, which pgx keeps apart from its cache, lest every replay or 409
// cost the connection's next request two round trips (to deallocate and
// prepare them again). A request that prefers to wait for a key in flight
// (Prefer: wait), and a claim without Speculative, claim at once, as
// below. The middleware leaves Speculative unset for a key that it claimed
// lately itself (it forgets 1 in 1,000 of the keys 16,384 claims ago): a
// retry, or a duplicate in flight, that comes back to the same process is
// then answered in one round trip without running its handler; one that
// reaches another process claims speculatively there, in two.
//
// An atomic claim at READ COMMITTED that is not deferred (lease_session.go)
// is one round trip on a pooled connection, outside any transaction. Its
// first statement reads the key by its primary key and, only when there is
// none (or it is past retention), tries the key's advisory lock. A
// completed key is replayed from that read; a key whose lock a request in
// flight holds is answered 409 from it, at once. The read uses the
// statement's snapshot, taken before the lock is tried, so a holder can
// commit the key and unlock it in between, and the key would look new. The
// lock is therefore tried by idem_session_lock (migration 009), which,
// having it, reads the key again, in a query with a snapshot of its own
// taken after the lock; a key that now exists is unlocked and the claim
// starts over, which answers from the key's row: one more round trip, in
// that race only. A replay of a completed key never calls it: it is one
// statement, one primary-key read. (Each statement takes
// its own snapshot at READ COMMITTED: with Config.IsoLevel empty, the
// server's default_transaction_isolation must be read committed, as it is
// unless configured.) A new key costs three round trips: the claim, the
// handler's first statement with its BEGIN, and Complete, which inserts the
// completed row, commits and unlocks. A replay costs one.
//
// Behind a pooler in transaction mode (Config.TransactionPooling) when the
// claim is not deferred, and at REPEATABLE READ or SERIALIZABLE (where a
// deferred claim's statements would share one snapshot, and the BEGIN that
// sets the level must come first), an atomic claim (lease_claimtx.go) reads
// the key first, in one round trip, and only for a key that is absent, past
// retention or replaceable sends a second: the transaction that takes the
// key's lock and inserts (INSERT ... ON CONFLICT DO NOTHING) or replaces
// the started row, left open for the handler. A new key costs four round
// trips, a replay one.
//
// A two-phase claim (lease_started.go), which must commit its row before
// the handler runs, first tries the lock and inserts the started row, in
// one round trip and one implicit transaction. For a key that exists the
// insert (INSERT ... ON CONFLICT DO NOTHING) inserts nothing and claims
// nothing, without an error; such a key, or one whose lock is held, is then
// read without a lock and answered from the read, so a two-phase replay
// costs two round trips. Only an expired lease or a key past retention goes
// on to one more round trip, a transaction that takes the lock and takes
// over or replaces the row. A new key costs three round trips: the claim,
// the handler's first statement with its BEGIN, and Complete.
//
// A claim of [Store.ClaimTx] (lease_callertx.go) runs in the caller's
// transaction: a savepoint, a read of the key, then one round trip that
// takes the key's lock and inserts the started row, or replaces one past
// retention. Complete updates the row and releases the savepoint, two round
// trips; the caller commits. A replay costs three: the savepoint, the read
// and the rollback to the savepoint.
//
// With Config.NoAdvisoryLocks (databases without advisory locks, or whose
// advisory locks do not span nodes) no claim takes a lock but its row's.
// An atomic claim of a key the middleware has not claimed lately inserts
// the started row first, in the claim's transaction, left open for the
// handler: a new key costs three round trips, a replay of a key this
// process has not seen three (the insert that claims nothing, its
// rollback, the read); a key it claimed lately is read first, as above: a
// replay costs one. A duplicate of a key in flight waits for the holder's
// row at most Config.ClaimLockTimeout, then is answered 409. The purge and
// the resumer's leader hold lease rows (idem_leader_leases), and
// migrations lock their version table. See docs/scale-out.md.
//
// Replays must come from the primary, never from an asynchronous read
// replica: a replica that lags shows a finished key as new, and the request
// runs twice. Give the store a pool on the primary.
//
// # Atomic mode
//
// In idem.ModeAtomic at READ COMMITTED (the default) the middleware's claim
// is deferred to the handler's first statement and holds the key by a
// transaction-scoped advisory lock (see Round trips). A claim that is not
// deferred takes a session-level advisory lock (pg_try_advisory_lock, which
// answers at once) on the connection that the lease keeps. The lock alone holds the key: the
// claim writes no row. The handler's transaction begins on that connection
// with its first statement, and the lease's Complete inserts the completed
// row with the response, commits and unlocks (see Round trips). If a row
// for the key appeared meanwhile, stored by a request that did not take the
// lock, the insert fails on the unique key and everything rolls back: the
// unique key stays the final fence. Complete then returns an error wrapping
// an *idemstore.CompletedError that carries the stored row, from which the
// middleware answers (the replay, or 422); it wraps idemstore.ErrLeaseLost.
//
// The connection never goes back to the pool holding a lock: Release and a
// failed Complete roll back and unlock in one round trip, and close the
// connection if that fails, which frees the lock on the server; a process
// that dies frees its locks the same way.
//
// The session-level lock needs the lease's session to stay on one server
// connection from claim to commit: true of direct connections and of
// poolers in session mode. Behind a pooler in transaction mode (PgBouncer
// with pool_mode = transaction) set Config.TransactionPooling; deferred
// claims work as they do on a direct connection, and the others as at
// stricter isolation levels, below.
//
// At REPEATABLE READ or SERIALIZABLE the claim opens the transaction
// instead, takes pg_try_advisory_xact_lock and inserts a started row with
// INSERT ... ON CONFLICT DO NOTHING, and Complete updates it, so that the
// key row's insert does not enter the transaction's predicate locks. Either
// way the business writes, the key and the response commit together or not
// at all: a crash at any point leaves nothing, and the key is free again at
// once. Release rolls everything back.
//
// The holder's uncommitted work is invisible to other requests, but its
// advisory lock is not: a duplicate that finds the lock taken is answered
// "in flight" (409) at once, without ever waiting for the holder, however
// long the holder runs. Each request in flight holds a pool connection for
// its duration; size the pool for that.
//
// # Two-phase mode
//
// In idem.ModeTwoPhase the claim commits a started row first, with locked_at,
// the lease's expiry (lease_expires_at, for operators) and a fencing token
// (lease_token, 1 for a first claim), under the same advisory lock. The handler's transaction is opened on its first
// TxFromContext, so a handler can call a card processor (with a key from
// idem.DeriveKey) before it holds a connection; its BEGIN goes out with
// its first statement, in one round trip. Complete runs the fenced
// UPDATE ... WHERE lease_token = $token AND created_at = $row AND status =
// 'started' in the handler's transaction and commits only if exactly one
// row matched (created_at tells the lease's row from one made anew after
// it was purged or deleted, whose tokens start again at 1); the
// check is a function of the schema that raises SQLSTATE IDEM1 otherwise,
// which aborts the transaction before its COMMIT. Release rolls back and
// deletes the row if the token still matches.
//
// A started key whose lease is older than the lock timeout is taken over by
// the next request with the same fingerprint: the token grows by one
// (UPDATE ... SET lease_token = lease_token + 1 WHERE lease_token = $old).
// The holder it was taken from, if it is only slow and not dead, can no
// longer commit: its fenced update matches no row, its business writes roll
// back, and Complete returns an error wrapping idemstore.ErrLeaseLost. A key that
// outlived retention is replaced in place by the next claim; its token grows
// too, so that no earlier holder can ever complete it.
//
// # Conflicts, errors and timeouts
//
// With Config.IsoLevel set to serializable, or with handlers that can
// deadlock, the lease implements idemstore.ConflictReporter: a statement of the
// handler's transaction, or its commit, that failed with SQLSTATE 40001 or
// 40P01 makes the middleware release the key and run the request again.
//
// Waiting for a pool connection is bounded by Config.AcquireTimeout; after
// it, and on any connection failure, calls fail with an error wrapping
// idemstore.ErrUnavailable, which the middleware answers with 503 and
// Retry-After, without running the handler. A cancelled context returns the
// context's error. Nothing above the store sees pgx types, except the
// pgx.Tx of TxFromContext.
//
// When a handler's context is cancelled during a statement, pgx by default
// closes the connection; the server ends the transaction, and frees the key,
// only when it next reads from or writes to it, which a long statement
// delays. To stop the statement on the server at once, build the pool with
// pgconn.CancelRequestContextWatcherHandler as the connection config's
// BuildContextWatcherHandler.
//
// # Inside the caller's transaction
//
// [Store.ClaimTx] claims a key in a transaction of the caller's, for work
// that is not an HTTP handler, such as a queue consumer: the response is
// stored in that transaction and commits when the caller commits it.
//
// # Retention
//
// [Store.Purge] deletes keys created before a time, in short batches that
// skip rows held by requests in flight. Keys past retention that the purge
// has not reached yet are treated as absent by claims. Do not partition the
// key table by created_at: PostgreSQL enforces uniqueness per partition
// only, so a key would be accepted again in the next partition.
//
// # Outbox
//
// The store is an idemoutbox.Store: idemoutbox.Enqueue writes an event into
// the idem_outbox table in the lease's transaction ([Store.EnqueueEventTx]
// in a transaction of the caller's), and an idemoutbox.Relay delivers it
// after the commit. [Store.DeliverBatch] takes due events with SELECT ...
// FOR UPDATE SKIP LOCKED and keeps them locked until their outcomes commit,
// so relays in any number of processes never deliver one event at the same
// time. See docs/outbox.md.
package idempg
