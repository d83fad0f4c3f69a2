-- idem_session_lock is the lock of the atomic claim at READ COMMITTED
-- (querySessionClaim), which calls it only when its read of the key found
-- none, or one past retention (created at or before cutoff). It tries the
-- key's session-level advisory lock without waiting, and returns false if
-- another session holds it. Having it, it reads the key again: a VOLATILE
-- function's query takes a snapshot of its own, after the lock, so it sees
-- a key that the lock's previous holder committed after the claim's read
-- began. If such a key exists it unlocks and raises SQLSTATE IDEM3, and the
-- claim reads the key, which answers from its row. A replay of a completed
-- key never calls it: its claim is one primary-key read.
CREATE FUNCTION idem_session_lock(lock_key bigint, client text, idem_key text, cutoff timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT pg_try_advisory_lock(lock_key) THEN
        RETURN false;
    END IF;
    PERFORM FROM idempotency_keys
    WHERE client_id = client AND idempotency_key = idem_key AND (cutoff IS NULL OR created_at > cutoff);
    IF FOUND THEN
        PERFORM pg_advisory_unlock(lock_key);
        RAISE EXCEPTION 'idem: key exists' USING ERRCODE = 'IDEM3';
    END IF;
    RETURN true;
END
$$;

-- idem_leader_leases holds the leaders that Config.NoAdvisoryLocks takes
-- by a row instead of a session-level advisory lock: the purge and the
-- resumer's lead, one row per name. A holder names itself (holder) and
-- renews expires_at while it leads; a row past expires_at is free to the
-- next taker. It lives beside the key table, in the same schema.
CREATE TABLE idem_leader_leases (
    name       text        PRIMARY KEY,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL
);
