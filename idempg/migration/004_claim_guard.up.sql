-- idem_claim_guard is the second statement of a deferred atomic claim,
-- sent in one round trip with the first (a read of the key), BEGIN and the
-- handler's first statement. It takes the key's transaction-scoped advisory
-- lock without waiting and raises SQLSTATE IDEM2 if another transaction
-- holds it (a request in flight). Holding the lock, it reads the key again,
-- with a snapshot taken after the lock (each statement of a volatile
-- function takes its own at READ COMMITTED), and raises IDEM3 if a key that
-- is not past retention (created after cutoff; NULL for none is) exists.
-- Either error aborts the implicit transaction: the server skips the rest up
-- to Sync, BEGIN and the handler's statement included, and rolls back,
-- which frees the lock. Otherwise the lock stays with the transaction that
-- BEGIN then makes explicit, for the handler.
CREATE FUNCTION idem_claim_guard(lock_key bigint, client text, idem_key text, cutoff timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock(lock_key) THEN
        RAISE EXCEPTION 'idem: key in flight' USING ERRCODE = 'IDEM2';
    END IF;
    IF EXISTS (
        SELECT FROM idempotency_keys
        WHERE client_id = client AND idempotency_key = idem_key
          AND (cutoff IS NULL OR created_at > cutoff)
    ) THEN
        RAISE EXCEPTION 'idem: key exists' USING ERRCODE = 'IDEM3';
    END IF;
    RETURN true;
END
$$;
