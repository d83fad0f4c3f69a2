-- Recovery points of phased operations (idem.Phases): the last committed
-- point and the small state that later phases need, saved in the same
-- transaction as each phase's writes. Nullable columns: instances that do
-- not know them keep working, and their INSERT OR REPLACE of a key past
-- retention leaves the new row without a recovery point.
ALTER TABLE idempotency_keys ADD COLUMN recovery_point TEXT;
ALTER TABLE idempotency_keys ADD COLUMN recovery_state BLOB;  -- JSON object of strings

-- The completer's listing: started keys that passed a recovery point.
CREATE INDEX idempotency_keys_unfinished_idx ON idempotency_keys (created_at)
    WHERE status = 'started' AND recovery_point IS NOT NULL;
