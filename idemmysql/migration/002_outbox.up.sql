-- The transactional outbox: events written in the same transaction as the
-- business change, delivered afterwards by a relay (package idemoutbox).
-- Bytes throughout, as idempotency_keys: the payload is delivered byte for
-- byte as enqueued, and an error of any encoding is kept. Times are Unix
-- microseconds (UTC).
CREATE TABLE IF NOT EXISTS idem_outbox (
    id              VARBINARY(255)  NOT NULL PRIMARY KEY,  -- stable: derived from the key and a purpose
    client_id       VARBINARY(512)  NOT NULL,
    type            VARBINARY(255)  NOT NULL,
    destination     VARBINARY(1024) NOT NULL DEFAULT '',
    payload         LONGBLOB        NOT NULL,
    status          VARCHAR(16) CHARACTER SET ascii NOT NULL DEFAULT 'pending',
    attempts        INT             NOT NULL DEFAULT 0,
    created_at      BIGINT          NOT NULL,
    next_attempt_at BIGINT          NOT NULL,
    delivered_at    BIGINT,
    last_error      MEDIUMBLOB,
    -- The relay's poll: due pending events, oldest due first.
    INDEX idem_outbox_due_idx (status, next_attempt_at),
    -- The purge of delivered events past retention.
    INDEX idem_outbox_delivered_idx (status, delivered_at),
    -- A client's events, newest first.
    INDEX idem_outbox_client_idx (client_id, created_at, id),
    CONSTRAINT idem_outbox_status_check CHECK (status IN ('pending', 'delivered', 'dead'))
) ENGINE = InnoDB;
