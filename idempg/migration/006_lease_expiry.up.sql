-- When a key's lease expires, as its holder was given it at the claim or
-- takeover (the claim's time plus its lock timeout), so that operators
-- (idem keys) judge a lease by the store, not by a flag. A nullable column
-- without a default: adding it rewrites nothing, instances that do not
-- know it keep working, and a key without it is judged by locked_at and
-- the operator's lock timeout.
ALTER TABLE idempotency_keys ADD COLUMN lease_expires_at timestamptz;

-- An instance that does not know the column takes a key over, releases it
-- or replaces it by setting locked_at alone: the expiry it leaves would be
-- its previous holder's. Forget it then, so the key falls back to
-- locked_at. The claims of this version set both columns in one statement,
-- and the completion of a response sets neither, so the trigger never runs
-- for them.
CREATE FUNCTION idem_reset_lease_expiry() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.lease_expires_at := NULL;
    RETURN NEW;
END
$$;

CREATE TRIGGER idempotency_keys_reset_lease_expiry
    BEFORE UPDATE OF locked_at ON idempotency_keys
    FOR EACH ROW WHEN (OLD.locked_at IS DISTINCT FROM NEW.locked_at AND NEW.lease_expires_at IS NOT NULL
                       AND OLD.lease_expires_at IS NOT DISTINCT FROM NEW.lease_expires_at)
    EXECUTE FUNCTION idem_reset_lease_expiry();
