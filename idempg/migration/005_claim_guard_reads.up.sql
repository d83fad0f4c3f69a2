-- idem_claim_guard now also tells the claim what it found, so that the
-- claim's round trip need not read the key itself: it returns false when
-- the key has no row and true when its row is past retention (created at
-- or before cutoff), which the claim replaces when it stores its response.
-- It raises as before: SQLSTATE IDEM2 if another transaction holds the
-- key's lock, IDEM3 if a key that is not past retention exists. The caller
-- reads that key after the refusal, on the same connection.
CREATE OR REPLACE FUNCTION idem_claim_guard(lock_key bigint, client text, idem_key text, cutoff timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    created timestamptz;
BEGIN
    IF NOT pg_try_advisory_xact_lock(lock_key) THEN
        RAISE EXCEPTION 'idem: key in flight' USING ERRCODE = 'IDEM2';
    END IF;
    SELECT created_at INTO created FROM idempotency_keys
    WHERE client_id = client AND idempotency_key = idem_key;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF cutoff IS NULL OR created > cutoff THEN
        RAISE EXCEPTION 'idem: key exists' USING ERRCODE = 'IDEM3';
    END IF;
    RETURN true;
END
$$;
