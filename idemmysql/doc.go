// Package idemmysql is an idemstore.Store in a MySQL or MariaDB database
// (InnoDB), on database/sql with github.com/go-sql-driver/mysql: the key,
// the stored response and the handler's business writes commit together
// in the service's own database, as with idempg.
//
//	store, err := idemmysql.Open(ctx, "app:secret@tcp(127.0.0.1:3306)/shop", nil)
//	...
//	err = store.Migrate(ctx)
//	mw := idem.New(store, idem.Config{...})
//
// A handler writes in the key's transaction, which [TxFromContext] returns.
// It passes idemtest's conformance suites (RunStoreTests, RunAdminTests,
// RunOutboxTests) on MariaDB 10.11; see "What was checked" for MySQL.
//
// # Sessions
//
// [Open] asks the server for its version and sql_mode, and refuses to run
// (an error wrapping [ErrNotStrict]) when the sql_mode has neither
// STRICT_TRANS_TABLES nor STRICT_ALL_TABLES: without them InnoDB truncates
// a value too long for its column with a warning, and a stored response or
// key could come back cut short. Every connection of its pool then gets:
//
//   - READ COMMITTED isolation (tx_isolation on MariaDB before 11.1,
//     transaction_isolation elsewhere), for the key's statements and the
//     handler's alike. Under InnoDB's default, REPEATABLE READ, a locking
//     read or an insert takes next-key and gap locks on the unique index,
//     so claims of neighbouring new keys, and handlers' range updates,
//     block one another; under READ COMMITTED InnoDB takes gap locks only
//     for duplicate-key and foreign-key checks, and a locking read locks
//     only the rows it returns. A handler's statements see the newest
//     committed rows at each statement, not a snapshot taken at the first:
//     it reads with SELECT ... FOR UPDATE what it means to change, as on
//     PostgreSQL's default level. A handler cannot change the level of the
//     transaction it is given.
//   - innodb_lock_wait_timeout from [Config.LockWaitTimeout] (5 s; the
//     server's default is 50 s): how long a handler's statement, and a
//     completion, wait for a row that another transaction holds before
//     failing with error 1205.
//   - client-side parameter interpolation (interpolateParams), so that each
//     statement is one round trip rather than a prepare, an execute and a
//     close; bytes are sent as _binary literals.
//   - found rows (clientFoundRows): an UPDATE reports the rows it matched,
//     so that a fenced update that changes nothing is not a lost lease.
//
// # Schema
//
// Keys, client ids, paths, hashes, headers and bodies are bytes
// (VARBINARY, BLOB, LONGBLOB): compared byte for byte, with no collation
// folding case or trailing spaces ("Key", "key" and "key " are three keys),
// and stored and replayed with no charset conversion. Times are Unix
// microseconds in BIGINT columns. Tables are InnoDB. The migrations are
// embedded (migration/NNN_name.up.sql and .down.sql, versions in
// idem_schema_migrations); MySQL commits DDL at once, so a migration is
// not a transaction: each step holds a named lock of the database
// (GET_LOCK, waiting up to 60 s for another process's step), and each
// script is idempotent (CREATE TABLE IF NOT EXISTS, indexes declared in
// it), so that a step that failed part way runs again in full. Concurrent
// starts apply each migration once.
//
// # Atomic mode
//
// The claim begins the lease's transaction on a connection of its own and
// inserts the started row in it; the transaction stays open for the
// handler, and Complete stores the response by a fenced UPDATE of that row
// and commits it with the handler's writes. Release rolls it all back.
// The uncommitted row is invisible to other transactions, but InnoDB's
// duplicate check makes another claim of the key wait for it: the claims'
// statements therefore run with SET STATEMENT innodb_lock_wait_timeout = 0
// FOR ..., which fails at once with error 1205 instead of waiting, and the
// key is answered as in flight (409) with its request unknown, as idempg
// answers a key whose row is not visible. A key past retention is replaced
// in place by an UPDATE fenced by the token and created_at it was read
// with (the token grows by one).
//
// Errors of the handler's transaction: a deadlock (1213) rolls the whole
// transaction back, the claimed row with it; the lease's connection notes
// it, and the lease's Conflicted (idemstore.ConflictReporter) reports it,
// so the middleware releases the lease and runs the request again, claim
// included, up to idem.Config.MaxConflictRetries times. A lock wait
// timeout (1205) rolls back only the statement, under InnoDB's default
// innodb_rollback_on_timeout=OFF: the handler sees the error and decides;
// with innodb_rollback_on_timeout=ON, which [Open] reads, it is a conflict
// as a deadlock is. A duplicate key (1062) at a claim means the key exists:
// the claim reads it and answers from it. The completion is an UPDATE of
// the lease's own row, so it never meets 1062; a completion that finds its
// row gone or changed reads the key, and returns an error wrapping an
// *idemstore.CompletedError that carries it when another request completed
// it (the replay, or 422), idemstore.ErrLeaseLost otherwise, as idempg
// does. A failed COMMIT that the server answered committed nothing; one
// whose connection broke is idemstore.ErrOutcomeUnknown.
//
// # Two-phase mode
//
// The claim is one INSERT in autocommit mode, committed at once, with
// fencing token 1; the handler's transaction begins on the first
// TxFromContext, on a connection of its own, so a handler can call other
// systems first. Every write to the key's row (completion, recovery point,
// release) is fenced by the lease's token and the row's created_at, so that
// a row made anew after this one was purged or deleted, whose tokens start
// again at 1, never takes an earlier holder's writes. A started key whose
// lease expired is taken over by the next claim of the same request, with
// the next token (idemstore.ClaimParams.CanTakeOver). Recovery points
// (idemstore.RecoveryLease) are saved with each phase's writes, and the
// resumer lists unfinished keys (idemstore.RecoveryStore).
//
// # Round trips
//
// With interpolated parameters each statement is one round trip; MySQL's
// protocol has no pipelining, so BEGIN, each statement and COMMIT are one
// each. TestRoundTrips counts them, for a handler that writes nothing of
// its own (each business statement adds one):
//
//	                                     new key  replay  conflict (409)
//	atomic, speculative (the default)       4        4         3
//	atomic, a key claimed lately            5        1         4
//	two-phase                               2        2         2
//
// An atomic claim that the middleware marks speculative
// (idemstore.ClaimParams.Speculative, its default for keys it has not
// seen lately) inserts first: BEGIN and the INSERT, then Complete's UPDATE
// and COMMIT. A key the middleware claimed lately is likely a retry: it is
// read first, and a replay costs that one read. A two-phase claim inserts
// first too; a Complete with no handler transaction is one autocommit
// UPDATE. On PostgreSQL the deferred atomic claim costs two round trips
// for a new key, by pipelining that MySQL does not have.
//
// # Maintenance
//
// The purge ([Store.Purge], [Store.LockPurge]) deletes in batches, each a
// short transaction that picks its keys with SELECT ... FOR UPDATE SKIP
// LOCKED, so that a key a request holds is passed over, never waited for,
// and deletes them by primary key. The purge lock and the resumer's
// leader lock ([Store.TryLead]) are GET_LOCK locks taken without waiting
// on a connection kept out of the pool while they are held: a process that
// dies, or a connection that breaks, frees them with its session. Lock
// names are the server's, not the database's, so each name carries a hash
// of the database's name (51 characters, under MySQL's limit of 64). Key
// admin (idemstore.KeyAdmin) reads a key with FOR UPDATE and changes it in
// the same transaction; [Store.Ready] checks the schema version.
//
// The outbox (idemoutbox.Store) is enqueued in the lease's transaction
// with INSERT ... ON DUPLICATE KEY UPDATE (not INSERT IGNORE, which would
// turn every error, a value too long included, into a warning); the relay
// takes a batch with SELECT ... FOR UPDATE SKIP LOCKED in a transaction
// that stays open while it delivers, so that relays in several instances
// never deliver one event together.
//
// # What was checked, and where MySQL 8.0 may differ
//
// Every statement and behaviour above was run on MariaDB 10.11 only
// (MySQL 8.0 is not installable where this store was built): the
// conformance suites, the round-trip counts, the deadlock test, concurrent
// migrations and the sql_mode check. On MySQL 8.0:
//
//   - SET STATEMENT is MariaDB's, and MySQL's per-statement SET_VAR hint
//     does not take InnoDB's variables (Percona Server's does). On MySQL
//     the claim's statements run with the session's
//     innodb_lock_wait_timeout, whose minimum there is 1 s: a duplicate of a key held by an open atomic
//     claim waits up to Config.LockWaitTimeout before it is answered 409,
//     instead of at once. Set Config.LockWaitTimeout to 1s on MySQL. Not
//     run.
//   - The isolation variable is transaction_isolation (tx_isolation was
//     removed in 8.0); Open picks it by VERSION(). Both default to
//     REPEATABLE READ; the store sets READ COMMITTED either way.
//   - SKIP LOCKED exists from MySQL 8.0.1 and MariaDB 10.6, with the same
//     meaning for the statements here (single-table locking reads with
//     LIMIT). Not run on MySQL.
//   - GET_LOCK: both allow several locks per session (MySQL 5.7, MariaDB
//     10.0.2) and free them when the session ends; MySQL refuses names over
//     64 characters, which the store's names are not. IS_USED_LOCK and
//     RELEASE_LOCK behave alike. Not run on MySQL.
//   - JSON: the store uses no JSON column or function (headers and recovery
//     state are JSON encoded by Go into LONGBLOB), so MySQL's binary JSON
//     type and MariaDB's LONGTEXT alias do not matter.
//   - CHECK constraints are enforced from MySQL 8.0.16 (MariaDB 10.2);
//     before, the status checks are parsed and ignored.
//   - MySQL 8's default authentication, caching_sha2_password, needs TLS
//     or the driver's allowPublicKeyRetrieval=true in the DSN.
//   - Deadlock detection (innodb_deadlock_detect, on by default in both):
//     with it off, a deadlock ends as a lock wait timeout (1205) after
//     innodb_lock_wait_timeout.
package idemmysql
