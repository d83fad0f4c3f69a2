package idemsqlite

const (
	queryCreateVersionTable = `CREATE TABLE IF NOT EXISTS idem_schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
)`

	queryVersionTableExists = `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'idem_schema_migrations')`

	querySchemaVersion = `SELECT COALESCE(MAX(version), 0) FROM idem_schema_migrations`

	queryRecordMigration = `INSERT INTO idem_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`

	queryForgetMigration = `DELETE FROM idem_schema_migrations WHERE version = ?`

	querySelectKey = `SELECT request_method, request_path, request_hash, request_fields, status, lease_token,
       response_status, response_headers, response_body, created_at, locked_at, lease_expires_at, trace_context
FROM idempotency_keys
WHERE client_id = ? AND idempotency_key = ?`

	// queryInsertKey claims a key that does not exist or has expired; the
	// caller holds the write lock and has read the row first. A replaced
	// row's token keeps growing, so its old holder can never complete it.
	// The last values are the lease's expiry (idemstore.ClaimParams.LeaseExpires)
	// and the request's trace context.
	queryInsertKey = `INSERT OR REPLACE INTO idempotency_keys
    (client_id, idempotency_key, request_method, request_path, request_hash, request_fields,
     status, lease_token, created_at, locked_at, lease_expires_at, trace_context)
VALUES (?, ?, ?, ?, ?, ?, 'started', ?, ?, ?, ?, ?)`

	queryTakeOverKey = `UPDATE idempotency_keys
SET lease_token = lease_token + 1, locked_at = ?, lease_expires_at = ?, trace_context = ?
WHERE client_id = ? AND idempotency_key = ? AND status = 'started' AND lease_token = ?`

	// queryCompleteKey is the fence: it stores the response only if the
	// lease's token still holds the started key, in the row the lease
	// claimed. The row's created_at tells it from a row made anew after
	// this one was deleted (purged, or by an operator), whose tokens start
	// again at 1.
	queryCompleteKey = `UPDATE idempotency_keys
SET status = 'completed', response_status = ?, response_headers = ?, response_body = ?, completed_at = ?
WHERE client_id = ? AND idempotency_key = ? AND status = 'started' AND lease_token = ? AND created_at = ?`

	// queryUnlockLease and queryDeleteLease release a two-phase key: a key
	// that passed a recovery point stays there with no holder (locked_at
	// NULL), for the next request or the resumer to take over at once;
	// one that did not is deleted (see idempg's queryReleaseKey).
	queryUnlockLease = `UPDATE idempotency_keys SET locked_at = NULL, lease_expires_at = NULL
WHERE client_id = ?1 AND idempotency_key = ?2 AND status = 'started' AND lease_token = ?3 AND created_at = ?4
  AND recovery_point IS NOT NULL`

	queryDeleteLease = `DELETE FROM idempotency_keys
WHERE client_id = ?1 AND idempotency_key = ?2 AND status = 'started' AND lease_token = ?3 AND created_at = ?4
  AND recovery_point IS NULL`

	// queryPurgeBatch deletes up to ?2 keys created before ?1: completed
	// ones, and started ones whose lease was taken before ?1 too, so long
	// expired (retention is longer than the lease).
	queryPurgeBatch = `DELETE FROM idempotency_keys
WHERE (client_id, idempotency_key) IN (
    SELECT client_id, idempotency_key FROM idempotency_keys
    WHERE created_at < ?1 AND (status = 'completed' OR locked_at IS NULL OR locked_at < ?1) LIMIT ?2)`

	// queryKeyStats counts the started keys, those whose lease was taken
	// at or before ?1 (expired), and the oldest lease time.
	queryKeyStats = `SELECT count(*), count(*) FILTER (WHERE locked_at <= ?1), min(locked_at)
FROM idempotency_keys WHERE status = 'started'`

	// queryPurgeCount counts the keys that queryPurgeBatch would delete.
	queryPurgeCount = `SELECT count(*) FROM idempotency_keys
WHERE created_at < ?1 AND (status = 'completed' OR locked_at IS NULL OR locked_at < ?1)`
)
