package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/idemkit/idem/cmd/internal/database"
)

// ReplayCold is the variant of retries of completed keys that reach a
// process that did not claim them lately, as retries behind a load
// balancer mostly do: there the middleware claims speculatively, and the
// claim's refusal comes back with the handler's first statement, where
// Replay's keys are claimed at once (see idem's recent-keys hint). It runs
// only when asked for and only on PostgreSQL, where the deferred claim
// is.
const ReplayCold = "replay-cold"

// coldPerRound is how many keys replay-cold has for each round when the
// run is timed: more than these machines answer in a round, so that no key
// is retried twice (a second retry would find the key remembered).
const coldPerRound = 60_000

// coldKeys makes n completed keys that the replay-cold variant retries, each
// once: copies, under new keys, of the completed key template, which the
// bench's client created through another process. It returns the key of a
// request sequence number, which is a copy's while they last.
func coldKeys(ctx context.Context, db *database.DB, template string, n int64) (func(seq int64) string, error) {
	if db.Postgres == nil {
		return nil, fmt.Errorf("bench: %s needs PostgreSQL", ReplayCold)
	}
	prefix := fmt.Sprintf("bench-cold-%d-", time.Now().UnixNano())
	tag, err := db.Postgres.Pool().Exec(ctx, `INSERT INTO idempotency_keys
    (client_id, idempotency_key, request_method, request_path, request_hash, request_fields,
     status, lease_token, response_status, response_headers, response_body,
     created_at, locked_at, completed_at)
SELECT k.client_id, $2 || g, k.request_method, k.request_path, k.request_hash, k.request_fields,
       k.status, k.lease_token, k.response_status, k.response_headers, k.response_body,
       k.created_at, k.locked_at, k.completed_at
FROM idempotency_keys k, generate_series(1, $3::bigint) g
WHERE k.client_id = $4 AND k.idempotency_key = $1 AND k.status = 'completed'`, template, prefix, n, benchClient)
	if err != nil {
		return nil, fmt.Errorf("bench: copy the %s keys: %w", ReplayCold, err)
	}
	if tag.RowsAffected() != n {
		return nil, fmt.Errorf("bench: copied %d %s keys, want %d", tag.RowsAffected(), ReplayCold, n)
	}
	return func(seq int64) string { return prefix + strconv.FormatInt(seq%n+1, 10) }, nil
}
