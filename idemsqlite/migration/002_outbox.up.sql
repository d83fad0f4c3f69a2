-- The transactional outbox: events written in the same transaction as the
-- business change, delivered afterwards by a relay (package idemoutbox).
-- Times are Unix microseconds (UTC).
CREATE TABLE idem_outbox (
    id              TEXT    PRIMARY KEY,            -- stable: derived from the key and a purpose
    client_id       TEXT    NOT NULL,
    type            TEXT    NOT NULL,
    destination     TEXT    NOT NULL DEFAULT '',
    payload         BLOB    NOT NULL,               -- delivered byte for byte as enqueued
    status          TEXT    NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    delivered_at    INTEGER,
    last_error      TEXT
) WITHOUT ROWID;

CREATE INDEX idem_outbox_due_idx ON idem_outbox (next_attempt_at) WHERE status = 'pending';
CREATE INDEX idem_outbox_delivered_idx ON idem_outbox (delivered_at) WHERE status = 'delivered';
CREATE INDEX idem_outbox_client_idx ON idem_outbox (client_id, created_at DESC, id DESC);
