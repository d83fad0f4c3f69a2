CREATE INDEX IF NOT EXISTS idempotency_keys_unfinished_idx ON idempotency_keys (created_at)
    WHERE status = 'started' AND recovery_point IS NOT NULL;
DROP INDEX IF EXISTS idempotency_keys_recovery_idx;
