-- When a key's lease expires, as its holder was given it at the claim or
-- takeover (the claim's time plus its lock timeout; Unix microseconds), so
-- that operators (idem keys) judge a lease by the store, not by a flag. A
-- nullable column: instances that do not know it keep working, and a key
-- without it is judged by locked_at and the operator's lock timeout.
ALTER TABLE idempotency_keys ADD COLUMN lease_expires_at INTEGER;

-- An instance that does not know the column takes a key over, or releases
-- it, by setting locked_at alone: the expiry it leaves would be its
-- previous holder's. Forget it then, so the key falls back to locked_at.
-- The claims of this version set both columns in one statement, and the
-- completion of a response sets neither, so the trigger never runs for
-- them.
CREATE TRIGGER idempotency_keys_reset_lease_expiry
AFTER UPDATE OF locked_at ON idempotency_keys
FOR EACH ROW
WHEN OLD.locked_at IS NOT NEW.locked_at AND NEW.lease_expires_at IS NOT NULL
    AND OLD.lease_expires_at IS NEW.lease_expires_at
BEGIN
    UPDATE idempotency_keys SET lease_expires_at = NULL
    WHERE client_id = NEW.client_id AND idempotency_key = NEW.idempotency_key;
END;
