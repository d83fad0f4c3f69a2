package idempg

// The outbox's statements (see outbox.go).
const (
	queryEnqueueEvent = `INSERT INTO idem_outbox
    (id, client_id, type, destination, payload, status, attempts, created_at, next_attempt_at)
VALUES ($1, $2, $3, $4, $5, 'pending', 0, $6, $6)
ON CONFLICT (id) DO NOTHING`

	// queryTakeDueEvents locks up to $2 pending events due at $1. Rows that
	// another relay holds are skipped, never waited for; they stay locked
	// until the taking transaction records their outcomes and commits.
	queryTakeDueEvents = `SELECT id, client_id, type, destination, payload, attempts, created_at, next_attempt_at, COALESCE(last_error, '')
FROM idem_outbox
WHERE status = 'pending' AND next_attempt_at <= $1
ORDER BY next_attempt_at
LIMIT $2
FOR UPDATE SKIP LOCKED`

	queryRecordOutcome = `UPDATE idem_outbox
SET status = $2, attempts = attempts + 1, next_attempt_at = $3, delivered_at = $4, last_error = COALESCE(NULLIF($5, ''), last_error)
WHERE id = $1`

	queryPurgeEventsBatch = `DELETE FROM idem_outbox
WHERE id IN (
    SELECT id FROM idem_outbox
    WHERE status = 'delivered' AND delivered_at < $1
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)`

	// queryRetryDead makes dead events pending at $1: all of them when $2
	// is NULL, else those whose id is in $2.
	queryRetryDead = `UPDATE idem_outbox
SET status = 'pending', attempts = 0, next_attempt_at = $1
WHERE status = 'dead' AND ($2::text[] IS NULL OR id = ANY ($2::text[]))`

	queryOutboxStats = `SELECT count(*) FILTER (WHERE status = 'pending'),
       min(created_at) FILTER (WHERE status = 'pending'),
       count(*) FILTER (WHERE status = 'dead')
FROM idem_outbox`

	// queryListEvents lists a client's events, newest first, after the
	// cursor ($3 created_at, $4 id; NULL for the first page).
	queryListEvents = `SELECT id, client_id, type, destination, payload, status, attempts, created_at, next_attempt_at,
       delivered_at, COALESCE(last_error, '')
FROM idem_outbox
WHERE client_id = $1 AND ($3::timestamptz IS NULL OR (created_at, id) < ($3::timestamptz, $4::text))
ORDER BY created_at DESC, id DESC
LIMIT $2`
)
