DROP INDEX IF EXISTS idempotency_keys_unfinished_idx;
DROP TRIGGER idempotency_keys_reset_recovery ON idempotency_keys;
DROP FUNCTION idem_reset_recovery();
ALTER TABLE idempotency_keys
    DROP COLUMN recovery_point,
    DROP COLUMN recovery_state;
