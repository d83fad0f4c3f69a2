-- One row per key, scoped by client. Times are Unix microseconds (UTC).
CREATE TABLE idempotency_keys (
    client_id        TEXT    NOT NULL,
    idempotency_key  TEXT    NOT NULL,
    request_method   TEXT    NOT NULL,
    request_path     TEXT    NOT NULL,
    request_hash     BLOB    NOT NULL,               -- SHA-256 fingerprint of the request
    request_fields   BLOB,                           -- digests of top-level fields, for 422 details
    status           TEXT    NOT NULL CHECK (status IN ('started', 'completed')),
    lease_token      INTEGER NOT NULL DEFAULT 1,     -- fencing token, +1 on every takeover
    response_status  INTEGER,
    response_headers BLOB,                           -- JSON object of replayed headers
    response_body    BLOB,                           -- bytes, replayed byte for byte
    created_at       INTEGER NOT NULL,
    locked_at        INTEGER,
    completed_at     INTEGER,
    PRIMARY KEY (client_id, idempotency_key)
) WITHOUT ROWID;

CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);
