package idemsqlite

// The outbox's statements (see outbox.go).
const (
	queryEnqueueEvent = `INSERT INTO idem_outbox
    (id, client_id, type, destination, payload, status, attempts, created_at, next_attempt_at)
VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, ?)
ON CONFLICT (id) DO NOTHING`

	queryDueEvents = `SELECT id, client_id, type, destination, payload, attempts, created_at, next_attempt_at, COALESCE(last_error, '')
FROM idem_outbox
WHERE status = 'pending' AND next_attempt_at <= ?
ORDER BY next_attempt_at
LIMIT ?`

	// queryRecordOutcome records an attempt of a still-pending event.
	queryRecordOutcome = `UPDATE idem_outbox
SET status = ?, attempts = attempts + 1, next_attempt_at = ?, delivered_at = ?, last_error = COALESCE(NULLIF(?, ''), last_error)
WHERE id = ? AND status = 'pending'`

	queryPurgeEventsBatch = `DELETE FROM idem_outbox
WHERE id IN (
    SELECT id FROM idem_outbox WHERE status = 'delivered' AND delivered_at < ? LIMIT ?)`

	queryRetryDead = `UPDATE idem_outbox
SET status = 'pending', attempts = 0, next_attempt_at = ?
WHERE status = 'dead'`

	queryRetryDeadOne = `UPDATE idem_outbox
SET status = 'pending', attempts = 0, next_attempt_at = ?
WHERE status = 'dead' AND id = ?`

	queryOutboxStats = `SELECT
    (SELECT count(*) FROM idem_outbox WHERE status = 'pending'),
    (SELECT min(created_at) FROM idem_outbox WHERE status = 'pending'),
    (SELECT count(*) FROM idem_outbox WHERE status = 'dead')`

	queryListEvents = `SELECT id, client_id, type, destination, payload, status, attempts, created_at, next_attempt_at,
       delivered_at, COALESCE(last_error, '')
FROM idem_outbox
WHERE client_id = ? AND (? OR created_at < ? OR (created_at = ? AND id < ?))
ORDER BY created_at DESC, id DESC
LIMIT ?`
)
