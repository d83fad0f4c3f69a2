DROP INDEX idempotency_keys_unfinished_idx;
ALTER TABLE idempotency_keys DROP COLUMN recovery_point;
ALTER TABLE idempotency_keys DROP COLUMN recovery_state;
