package idempg

import "strings"

// Hand-written SQL, one statement per constant. Parameters that PostgreSQL
// cannot type from their context carry explicit casts.
const (
	queryMigrationLock = `SELECT pg_advisory_xact_lock($1)`

	queryCreateVersionTable = `CREATE TABLE IF NOT EXISTS idem_schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

	queryVersionTableExists = `SELECT to_regclass('idem_schema_migrations') IS NOT NULL`

	querySchemaVersion = `SELECT COALESCE(max(version), 0) FROM idem_schema_migrations`

	queryRecordMigration = `INSERT INTO idem_schema_migrations (version, name) VALUES ($1, $2)`

	queryForgetMigration = `DELETE FROM idem_schema_migrations WHERE version = $1`

	// querySessionClaim is the atomic claim at READ COMMITTED, sent
	// outside any transaction: it reads a key and, only when there is none
	// or it was created at or before $4 (past retention; NULL for never),
	// tries the key's session-level advisory lock by idem_session_lock
	// (migration 009), which reads the key again after the lock and raises
	// IDEM3 if a key that is not past retention was committed meanwhile.
	// It returns one row even when the key does not exist; the first
	// column is whether it took the lock. A replay of a completed key is
	// this one primary-key read.
	querySessionClaim = `SELECT CASE WHEN k.client_id IS NULL OR k.created_at <= $4::timestamptz
            THEN ` + sessionLockCall + ` ELSE false END,
       k.request_method, k.request_path, k.request_hash, k.request_fields, k.status, k.lease_token,
       k.response_status, k.response_headers, k.response_body, k.created_at, k.locked_at, k.lease_expires_at,
       k.trace_context
FROM (VALUES (true)) AS one (row)
LEFT JOIN idempotency_keys k ON k.client_id = $1 AND k.idempotency_key = $2`

	// sessionLockCall is querySessionClaim's call of idem_session_lock.
	sessionLockCall = `idem_session_lock($3::bigint, $1::text, $2::text, $4::timestamptz)`

	// queryClaimGuard is the first statement of a deferred atomic claim
	// (lease_deferred.go): it takes the key's transaction-scoped lock and raises
	// IDEM2 or IDEM3 unless the key is free; it returns whether the key's
	// row is past retention (false for no row; see migrations 004 and 005).
	// $4 is the retention cutoff, NULL for none.
	queryClaimGuard = `SELECT idem_claim_guard($1::bigint, $2::text, $3::text, $4::timestamptz)`

	// queryBegin follows it; see deferredClaim.queue.
	queryBegin = `BEGIN`

	// queryInsertCompletedDeferred stores the response of a deferred claim:
	// it inserts the completed row (token 1), or replaces a row past
	// retention (created at or before $12; NULL for none), whose token
	// grows by one. Anything else, a row that appeared in between, stored
	// by a request that did not take the lock, matches nothing, and
	// idem_lease_held raises IDEM1: the unique key is the final fence.
	queryInsertCompletedDeferred = `WITH done AS (
    INSERT INTO idempotency_keys AS k
        (client_id, idempotency_key, request_method, request_path, request_hash, request_fields,
         status, lease_token, response_status, response_headers, response_body,
         created_at, locked_at, completed_at, trace_context)
    VALUES ($1, $2, $3, $4, $5, $6, 'completed', 1, $7, $8, $9, $10, $10, $11, $13)
    ON CONFLICT (client_id, idempotency_key) DO UPDATE
    SET request_method = EXCLUDED.request_method, request_path = EXCLUDED.request_path,
        request_hash = EXCLUDED.request_hash, request_fields = EXCLUDED.request_fields,
        status = 'completed', lease_token = k.lease_token + 1,
        response_status = EXCLUDED.response_status, response_headers = EXCLUDED.response_headers,
        response_body = EXCLUDED.response_body, created_at = EXCLUDED.created_at,
        locked_at = EXCLUDED.locked_at, completed_at = EXCLUDED.completed_at,
        trace_context = EXCLUDED.trace_context
    WHERE k.created_at <= $12::timestamptz
    RETURNING 1
)
SELECT idem_lease_held(count(*)) FROM done`

	// queryUnlock frees the lock that querySessionClaim took.
	queryUnlock = `SELECT pg_advisory_unlock($1::bigint)`

	// queryLoadKey reads a key without its lock: the replay fast path, and
	// the read inside a caller's transaction for ClaimTx.
	queryLoadKey = `SELECT true,
       request_method, request_path, request_hash, request_fields, status, lease_token,
       response_status, response_headers, response_body, created_at, locked_at, lease_expires_at, trace_context
FROM idempotency_keys
WHERE client_id = $1 AND idempotency_key = $2`

	// The claim statements below set the claim's lock_timeout (their last
	// parameter) in their guard, before their write can wait on a row
	// lock; it is transaction-local. An atomic claim's transaction goes on
	// to run the handler, so the claim saves the caller's setting in a
	// placeholder variable and puts it back after the claim statement, in
	// the same round trip.
	querySaveLockTimeout    = `SELECT set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true)`
	queryRestoreLockTimeout = `SELECT set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true)`

	// queryClaimInsert takes the key's advisory lock without waiting and,
	// only if it got it, inserts a started row unless one exists. It returns
	// whether the lock was taken, and the new row's token and ctid (NULL
	// when nothing was inserted). The guard CTE is evaluated once, before
	// the insert reads it. Its last parameter, as that of the two claim
	// statements below, is the request's trace context, and the one before
	// it the lease's expiry (idemstore.ClaimParams.LeaseExpires).
	queryClaimInsert = `WITH guard AS (
    SELECT pg_try_advisory_xact_lock($1::bigint) AS acquired, set_config('lock_timeout', $9::text, true)
), claimed AS (
    INSERT INTO idempotency_keys
        (client_id, idempotency_key, request_method, request_path, request_hash, request_fields,
         status, lease_token, created_at, locked_at, lease_expires_at, trace_context)
    SELECT $2::text, $3::text, $4::text, $5::text, $6::bytea, $7::bytea,
           'started', 1, $8::timestamptz, $8::timestamptz, $10::timestamptz, $11::text
    FROM guard WHERE guard.acquired
    ON CONFLICT (client_id, idempotency_key) DO NOTHING
    RETURNING lease_token, ctid, created_at
)
SELECT guard.acquired, claimed.lease_token, claimed.ctid, claimed.created_at FROM guard LEFT JOIN claimed ON true`

	// queryClaimReplace turns a key past retention into a fresh started
	// row, if the row is still the version the caller read ($9 token, $10
	// created_at). The token keeps growing, so that a holder of the old row
	// can never complete the new one.
	queryClaimReplace = `WITH guard AS (
    SELECT pg_try_advisory_xact_lock($1::bigint) AS acquired, set_config('lock_timeout', $11::text, true)
), replaced AS (
    UPDATE idempotency_keys k
    SET request_method = $4::text, request_path = $5::text, request_hash = $6::bytea, request_fields = $7::bytea,
        status = 'started', lease_token = k.lease_token + 1,
        response_status = NULL, response_headers = NULL, response_body = NULL,
        created_at = $8::timestamptz, locked_at = $8::timestamptz, lease_expires_at = $12::timestamptz,
        completed_at = NULL, trace_context = $13::text
    FROM guard
    WHERE guard.acquired AND k.client_id = $2::text AND k.idempotency_key = $3::text
      AND k.lease_token = $9::bigint AND k.created_at = $10::timestamptz
    RETURNING k.lease_token, k.ctid, k.created_at
)
SELECT guard.acquired, replaced.lease_token, replaced.ctid, replaced.created_at FROM guard LEFT JOIN replaced ON true`

	// queryClaimTakeOver takes over a started key whose lease expired, if
	// its token is still $5.
	queryClaimTakeOver = `WITH guard AS (
    SELECT pg_try_advisory_xact_lock($1::bigint) AS acquired, set_config('lock_timeout', $6::text, true)
), taken AS (
    UPDATE idempotency_keys k
    SET lease_token = k.lease_token + 1, locked_at = $4::timestamptz, lease_expires_at = $7::timestamptz,
        trace_context = $8::text
    FROM guard
    WHERE guard.acquired AND k.client_id = $2::text AND k.idempotency_key = $3::text
      AND k.status = 'started' AND k.lease_token = $5::bigint
    RETURNING k.lease_token, k.ctid, k.created_at
)
SELECT guard.acquired, taken.lease_token, taken.ctid, taken.created_at FROM guard LEFT JOIN taken ON true`

	// queryCompleteKey is the fence: it stores the response only if the
	// lease's token still holds the started key, in the row the lease
	// claimed ($8, its created_at), and idem_lease_held raises SQLSTATE
	// IDEM1 otherwise, which aborts the transaction. The created_at tells
	// the row from one made anew after it was deleted (purged, or by an
	// operator), whose tokens start again at 1. A completed key keeps no
	// recovery point: the completer lists none, and a key that passed no
	// recovery point changes no indexed column (migration 010), so its
	// completion can be a HOT update.
	queryCompleteKey = `WITH done AS (
    UPDATE idempotency_keys
    SET status = 'completed', response_status = $4, response_headers = $5, response_body = $6, completed_at = $7,
        recovery_point = NULL, recovery_state = NULL
    WHERE client_id = $1 AND idempotency_key = $2 AND status = 'started' AND lease_token = $3
      AND created_at = $8::timestamptz
    RETURNING 1
)
SELECT idem_lease_held(count(*)) FROM done`

	// queryCompleteOwnKey is queryCompleteKey for a row that the same
	// transaction claimed ($8 is the ctid the claim returned), as in atomic
	// mode: nobody else can change or move that row, and finding it by ctid
	// takes no predicate lock on the primary key's index pages, which under
	// SERIALIZABLE would make requests for unrelated keys fail each other.
	queryCompleteOwnKey = `WITH done AS (
    UPDATE idempotency_keys
    SET status = 'completed', response_status = $4, response_headers = $5, response_body = $6, completed_at = $7,
        recovery_point = NULL, recovery_state = NULL
    WHERE ctid = $8::tid AND client_id = $1 AND idempotency_key = $2 AND status = 'started' AND lease_token = $3
    RETURNING 1
)
SELECT idem_lease_held(count(*)) FROM done`

	// queryInsertCompletedNew stores the response of an atomic lease whose
	// claim wrote no row and saw no key (its lock fenced the key while the
	// handler ran): a plain insert, whose unique violation, should the key
	// have appeared in between, aborts the transaction. The unique key is
	// the final fence.
	queryInsertCompletedNew = `INSERT INTO idempotency_keys
    (client_id, idempotency_key, request_method, request_path, request_hash, request_fields,
     status, lease_token, response_status, response_headers, response_body,
     created_at, locked_at, completed_at, trace_context)
VALUES ($1, $2, $3, $4, $5, $6, 'completed', $7, $8, $9, $10, $11, $11, $12, $13)`

	// queryInsertCompletedFirst is queryInsertCompletedNew at token 1, as a
	// constant: a deferred claim's row (lease_deferred.go) is always at
	// token 1, and a parameter fewer is one encoding fewer in pgx, a few
	// hundred instructions. Its parameters are queryInsertCompletedNew's
	// without $7.
	queryInsertCompletedFirst = `INSERT INTO idempotency_keys
    (client_id, idempotency_key, request_method, request_path, request_hash, request_fields,
     status, lease_token, response_status, response_headers, response_body,
     created_at, locked_at, completed_at, trace_context)
VALUES ($1, $2, $3, $4, $5, $6, 'completed', 1, $7, $8, $9, $10, $10, $11, $12)`

	// queryInsertCompleted stores the response of an atomic lease whose
	// claim wrote no row (its advisory lock fenced the key while the handler
	// ran): it inserts the completed row, or replaces the row past retention
	// that the claim saw ($14 token, $15 created_at). Anything else, a row
	// that appeared in between, matches nothing, and idem_lease_held raises
	// IDEM1: the unique key is the final fence.
	queryInsertCompleted = `WITH done AS (
    INSERT INTO idempotency_keys AS k
        (client_id, idempotency_key, request_method, request_path, request_hash, request_fields,
         status, lease_token, response_status, response_headers, response_body,
         created_at, locked_at, completed_at, trace_context)
    VALUES ($1, $2, $3, $4, $5, $6, 'completed', $7, $8, $9, $10, $11, $11, $12, $13)
    ON CONFLICT (client_id, idempotency_key) DO UPDATE
    SET request_method = EXCLUDED.request_method, request_path = EXCLUDED.request_path,
        request_hash = EXCLUDED.request_hash, request_fields = EXCLUDED.request_fields,
        status = 'completed', lease_token = EXCLUDED.lease_token,
        response_status = EXCLUDED.response_status, response_headers = EXCLUDED.response_headers,
        response_body = EXCLUDED.response_body, created_at = EXCLUDED.created_at,
        locked_at = EXCLUDED.locked_at, completed_at = EXCLUDED.completed_at,
        trace_context = EXCLUDED.trace_context
    WHERE k.lease_token = $14::bigint AND k.created_at = $15::timestamptz
    RETURNING 1
)
SELECT idem_lease_held(count(*)) FROM done`

	queryCommit   = `COMMIT`
	queryRollback = `ROLLBACK`

	// queryReleaseKey frees a two-phase key, unless another request took it
	// over (the row, $4 created_at, and token $3 fence it): it deletes a key
	// that passed no recovery point, and leaves one that did at its
	// recovery point, with no holder (locked_at NULL), for the next request
	// or the resumer to take over at once. The next claim of a deleted
	// key makes a new row, at token 1 again but with a created_at of its
	// own, which no earlier holder's fence matches.
	queryReleaseKey = `WITH kept AS (
    UPDATE idempotency_keys SET locked_at = NULL, lease_expires_at = NULL
    WHERE client_id = $1 AND idempotency_key = $2 AND status = 'started' AND lease_token = $3
      AND created_at = $4::timestamptz AND recovery_point IS NOT NULL
    RETURNING 1
)
DELETE FROM idempotency_keys
WHERE client_id = $1 AND idempotency_key = $2 AND status = 'started' AND lease_token = $3
  AND created_at = $4::timestamptz AND recovery_point IS NULL`

	// queryPurgeBatch deletes up to $2 keys created before $1, oldest
	// first, from $3 on: completed ones, and started ones whose lease was
	// taken before $1 too, so long expired (retention is longer than the
	// lease). Rows locked by a request in flight are skipped, so the purge
	// never waits for one. It returns the number deleted and the newest
	// created_at among them, from which the next batch of the run starts
	// ($3): the index scan then begins past the rows that earlier batches
	// deleted, which stay in the index until vacuum, instead of stepping
	// over all of them again. Rows deleted by ctid: a locked row cannot
	// move before the statement ends.
	queryPurgeBatch = `WITH batch AS (
    SELECT ctid FROM idempotency_keys
    WHERE created_at >= $3 AND created_at < $1 AND (status = 'completed' OR locked_at IS NULL OR locked_at < $1)
    ORDER BY created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM idempotency_keys k USING batch b WHERE k.ctid = b.ctid
    RETURNING k.created_at
)
SELECT count(*), coalesce(max(created_at), $3) FROM gone`

	// queryPurgeBatchWaiting is queryPurgeBatch without the row locks of
	// FOR UPDATE SKIP LOCKED, which cost a second write of every deleted
	// row: the DELETE waits for a row that a request holds, so it runs
	// only under a short lock_timeout, and a batch that runs into it is
	// run again as queryPurgeBatch, which skips that row.
	queryPurgeBatchWaiting = `WITH gone AS (
    DELETE FROM idempotency_keys WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM idempotency_keys
        WHERE created_at >= $3 AND created_at < $1 AND (status = 'completed' OR locked_at IS NULL OR locked_at < $1)
        ORDER BY created_at
        LIMIT $2
    ))
    RETURNING created_at
)
SELECT count(*), coalesce(max(created_at), $3) FROM gone`

	// queryKeyStats counts the started keys, those whose lease was taken
	// at or before $1 (expired), and the oldest lease time.
	queryKeyStats = `SELECT count(*), count(*) FILTER (WHERE locked_at <= $1), min(locked_at)
FROM idempotency_keys WHERE status = 'started'`

	// queryPurgeCount counts the keys that queryPurgeBatch would delete.
	queryPurgeCount = `SELECT count(*) FROM idempotency_keys
WHERE created_at < $1 AND (status = 'completed' OR locked_at IS NULL OR locked_at < $1)`

	// queryTryPurgeLock takes the purge lock of the key table, a
	// session-level advisory lock, without waiting. Its key is in the
	// two-int4 space, apart from the claims' bigint keys: 1768187245
	// ("idem") and the key table's OID, so that stores on key tables in
	// different schemas of one database purge independently.
	queryTryPurgeLock = `SELECT pg_try_advisory_lock(1768187245, 'idempotency_keys'::regclass::oid::bigint::bit(32)::int)`

	// queryPurgeUnlock frees the purge lock that queryTryPurgeLock took.
	queryPurgeUnlock = `SELECT pg_advisory_unlock(1768187245, 'idempotency_keys'::regclass::oid::bigint::bit(32)::int)`

	// queryTryPurgeXactLock takes the same lock for one transaction, for
	// poolers in transaction mode.
	queryTryPurgeXactLock = `SELECT pg_try_advisory_xact_lock(1768187245, 'idempotency_keys'::regclass::oid::bigint::bit(32)::int)`

	// queryTakeLeaderLease takes the leader lease row $1 for holder $2
	// until now() + $3, if no one holds it or its holder let it expire
	// (Config.NoAdvisoryLocks). It returns a row only when it took it.
	queryTakeLeaderLease = `INSERT INTO idem_leader_leases AS l (name, holder, expires_at)
VALUES ($1, $2, now() + $3::interval)
ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
WHERE l.expires_at < now()
RETURNING true`

	// queryRenewLeaderLease extends holder $2's lease $1 to now() + $3. It
	// returns no row when $2 no longer holds it. Its row lock, until the
	// transaction ends, fences a taker: a purge batch that renews first
	// runs while no one else can take the lease.
	queryRenewLeaderLease = `UPDATE idem_leader_leases SET expires_at = now() + $3::interval
WHERE name = $1 AND holder = $2
RETURNING true`

	// queryDropLeaderLease gives up holder $2's lease $1.
	queryDropLeaderLease = `DELETE FROM idem_leader_leases WHERE name = $1 AND holder = $2`

	// queryLockVersionTable serializes migrations with
	// Config.NoAdvisoryLocks, instead of queryMigrationLock.
	queryLockVersionTable = `LOCK TABLE idem_schema_migrations IN EXCLUSIVE MODE`
)

// The row claims: queryClaimInsert, queryClaimReplace and
// queryClaimTakeOver as Config.NoAdvisoryLocks sends them. Their guard
// takes no lock ($1, the lock key, is only typed), and the key's row alone
// holds the key: a claim of a key whose row another transaction holds
// waits for that transaction, under the claim's lock_timeout.
var (
	queryRowClaimInsert   = withoutKeyLock(queryClaimInsert)
	queryRowClaimReplace  = withoutKeyLock(queryClaimReplace)
	queryRowClaimTakeOver = withoutKeyLock(queryClaimTakeOver)
)

// keyLockCall is how the claim statements try the key's lock.
const keyLockCall = "pg_try_advisory_xact_lock($1::bigint)"

// withoutKeyLock returns the claim statement q with its try of the key's
// lock replaced by true.
func withoutKeyLock(q string) string {
	if strings.Count(q, keyLockCall) != 1 {
		panic("idempg: a claim statement does not try the key's lock once:\n" + q)
	}
	return strings.Replace(q, keyLockCall, "$1::bigint IS NOT NULL", 1)
}
