-- Back to migration 004's guard, which always returns true.
CREATE OR REPLACE FUNCTION idem_claim_guard(lock_key bigint, client text, idem_key text, cutoff timestamptz)
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
