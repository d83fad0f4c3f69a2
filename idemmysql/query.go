package idemmysql

// Hand-written SQL, one statement per constant. Times are Unix
// microseconds; MySQL's placeholders are positional, so a value used twice
// is passed twice.
const (
	queryCreateVersionTable = `CREATE TABLE IF NOT EXISTS idem_schema_migrations (
    version    INT          NOT NULL PRIMARY KEY,
    name       VARCHAR(255) NOT NULL,
    applied_at BIGINT       NOT NULL
) ENGINE = InnoDB`

	queryVersionTableExists = `SELECT EXISTS (SELECT 1 FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = 'idem_schema_migrations')`

	querySchemaVersion = `SELECT COALESCE(MAX(version), 0) FROM idem_schema_migrations`

	queryRecordMigration = `INSERT INTO idem_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`

	queryForgetMigration = `DELETE FROM idem_schema_migrations WHERE version = ?`

	keyColumns = `request_method, request_path, request_hash, request_fields, status, lease_token,
       response_status, response_headers, response_body, created_at, locked_at, lease_expires_at, trace_context`

	querySelectKey = `SELECT ` + keyColumns + `
FROM idempotency_keys
WHERE client_id = ? AND idempotency_key = ?`

	// queryInsertKey claims a new key; error 1062 means that a row exists
	// (committed: a row another transaction holds uncommitted fails the
	// claim with 1205 instead, see Store.noWait). The last value is the
	// lease's expiry (idemstore.ClaimParams.LeaseExpires), then the
	// request's trace context.
	queryInsertKey = `INSERT INTO idempotency_keys
    (client_id, idempotency_key, request_method, request_path, request_hash, request_fields,
     status, lease_token, created_at, locked_at, lease_expires_at, trace_context)
VALUES (?, ?, ?, ?, ?, ?, 'started', 1, ?, ?, ?, ?)`

	// queryReplaceKey turns a key past retention into a fresh started
	// row, if the row is still the version the claim read (its token and
	// created_at). The token keeps growing, so that a holder of the old
	// row can never complete the new one.
	queryReplaceKey = `UPDATE idempotency_keys
SET request_method = ?, request_path = ?, request_hash = ?, request_fields = ?,
    status = 'started', lease_token = lease_token + 1,
    response_status = NULL, response_headers = NULL, response_body = NULL,
    created_at = ?, locked_at = ?, lease_expires_at = ?, trace_context = ?, completed_at = NULL,
    recovery_point = NULL, recovery_state = NULL
WHERE client_id = ? AND idempotency_key = ? AND lease_token = ? AND created_at = ?`

	// queryTakeOverKey takes over a started key whose lease expired, if
	// it is still the version the claim read.
	queryTakeOverKey = `UPDATE idempotency_keys
SET lease_token = lease_token + 1, locked_at = ?, lease_expires_at = ?, trace_context = ?
WHERE client_id = ? AND idempotency_key = ? AND status = 'started' AND lease_token = ? AND created_at = ?`

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
	// one that did not is deleted.
	queryUnlockLease = `UPDATE idempotency_keys SET locked_at = NULL, lease_expires_at = NULL
WHERE client_id = ? AND idempotency_key = ? AND status = 'started' AND lease_token = ? AND created_at = ?
  AND recovery_point IS NOT NULL`

	queryDeleteLease = `DELETE FROM idempotency_keys
WHERE client_id = ? AND idempotency_key = ? AND status = 'started' AND lease_token = ? AND created_at = ?
  AND recovery_point IS NULL`

	// queryPurgeSelect picks up to ? keys created before ? that a purge
	// deletes (idemstore.PurgeParams.Purges), skipping the rows that a
	// request holds locked; queryPurgeDelete deletes them in the same
	// transaction.
	queryPurgeSelect = `SELECT client_id, idempotency_key FROM idempotency_keys
WHERE created_at < ? AND (status = 'completed' OR locked_at IS NULL OR locked_at < ?)
LIMIT ? FOR UPDATE SKIP LOCKED`

	// queryKeyStats counts the started keys, those whose lease was taken
	// at or before ? (expired), and the oldest lease time.
	queryKeyStats = `SELECT COUNT(*), COALESCE(SUM(locked_at <= ?), 0), MIN(locked_at)
FROM idempotency_keys WHERE status = 'started'`

	// queryPurgeCount counts the keys that a purge would delete.
	queryPurgeCount = `SELECT COUNT(*) FROM idempotency_keys
WHERE created_at < ? AND (status = 'completed' OR locked_at IS NULL OR locked_at < ?)`
)
