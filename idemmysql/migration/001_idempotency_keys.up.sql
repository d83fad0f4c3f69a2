-- One row per key, scoped by client. Keys, client ids, requests and
-- responses are bytes (VARBINARY, LONGBLOB): compared byte for byte, with
-- no collation folding case or trailing spaces, and stored with no charset
-- conversion. Times are Unix microseconds (UTC). The indexes are in
-- the CREATE TABLE, which is idempotent: MySQL commits DDL at once, and a
-- migration that failed part way is applied again in full.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    client_id        VARBINARY(512)  NOT NULL,
    idempotency_key  VARBINARY(255)  NOT NULL,
    request_method   VARBINARY(32)   NOT NULL,
    request_path     BLOB            NOT NULL,
    request_hash     VARBINARY(64)   NOT NULL,    -- SHA-256 fingerprint of the request
    request_fields   LONGBLOB,                    -- digests of top-level fields, for 422 details
    status           VARCHAR(16) CHARACTER SET ascii NOT NULL,
    lease_token      BIGINT          NOT NULL DEFAULT 1,  -- fencing token, +1 on every takeover
    response_status  INT,
    response_headers LONGBLOB,                    -- JSON object of replayed headers
    response_body    LONGBLOB,                    -- bytes, replayed byte for byte
    created_at       BIGINT          NOT NULL,
    locked_at        BIGINT,
    lease_expires_at BIGINT,
    completed_at     BIGINT,
    recovery_point   VARBINARY(255),              -- idem.Phases' last committed point
    recovery_state   LONGBLOB,                    -- JSON object of strings
    PRIMARY KEY (client_id, idempotency_key),
    INDEX idempotency_keys_created_idx (created_at),
    INDEX idempotency_keys_started_idx (status, created_at),
    CONSTRAINT idempotency_keys_status_check CHECK (status IN ('started', 'completed'))
) ENGINE = InnoDB;
