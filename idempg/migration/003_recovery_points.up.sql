-- Recovery points of phased operations (idem.Phases): the last committed
-- point and the small state that later phases need, saved in the same
-- transaction as each phase's writes. Nullable columns without a default:
-- adding them rewrites nothing, and instances that do not know them keep
-- working; their keys have no recovery point.
ALTER TABLE idempotency_keys
    ADD COLUMN recovery_point text,
    ADD COLUMN recovery_state bytea;   -- JSON object of strings

-- A key replaced after retention starts over from no recovery point, also
-- when an instance that does not know the columns replaces it.
CREATE FUNCTION idem_reset_recovery() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.recovery_point := NULL;
    NEW.recovery_state := NULL;
    RETURN NEW;
END
$$;

CREATE TRIGGER idempotency_keys_reset_recovery
    BEFORE UPDATE OF created_at ON idempotency_keys
    FOR EACH ROW WHEN (OLD.created_at IS DISTINCT FROM NEW.created_at)
    EXECUTE FUNCTION idem_reset_recovery();

-- The completer's listing: started keys that passed a recovery point. On a
-- large table, create it with CREATE INDEX CONCURRENTLY before migrating;
-- the migration then finds it.
CREATE INDEX IF NOT EXISTS idempotency_keys_unfinished_idx ON idempotency_keys (created_at)
    WHERE status = 'started' AND recovery_point IS NOT NULL;
