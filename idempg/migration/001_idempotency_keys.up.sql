-- One row per key, scoped by client. Times come from the middleware's clock.
CREATE TABLE idempotency_keys (
    client_id        text        NOT NULL,
    idempotency_key  text        NOT NULL,
    request_method   text        NOT NULL,
    request_path     text        NOT NULL,
    request_hash     bytea       NOT NULL,          -- SHA-256 fingerprint of the request
    request_fields   bytea,                         -- digests of top-level fields, for 422 details
    status           text        NOT NULL CHECK (status IN ('started', 'completed')),
    lease_token      bigint      NOT NULL DEFAULT 1, -- fencing token, +1 on every takeover
    response_status  integer,
    response_headers jsonb,                         -- object of replayed headers; order of names is irrelevant
    -- The body is bytea, not jsonb: jsonb would reorder object keys, drop
    -- duplicate keys and rewrite whitespace and numbers, and a replay must be
    -- byte-identical to the first response. It need not be JSON at all.
    response_body    bytea,
    created_at       timestamptz NOT NULL,
    locked_at        timestamptz,
    completed_at     timestamptz,
    PRIMARY KEY (client_id, idempotency_key),
    CHECK (status = 'started' OR response_status IS NOT NULL)
);

-- For the purge, which deletes the oldest keys first.
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);

-- idem_lease_held raises SQLSTATE IDEM1 unless exactly one row matched the
-- fenced update that stores a response. The store sends that update and
-- COMMIT in one round trip; when the fence fails, the error aborts the
-- transaction, the server skips the COMMIT, and the handler's writes roll
-- back with it.
CREATE FUNCTION idem_lease_held(matched bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF matched <> 1 THEN
        RAISE EXCEPTION 'idem: lease lost: % rows matched the fenced update', matched
            USING ERRCODE = 'IDEM1';
    END IF;
    RETURN true;
END
$$;
