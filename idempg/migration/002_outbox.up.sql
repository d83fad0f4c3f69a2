-- The transactional outbox: events written in the same transaction as the
-- business change, delivered afterwards by a relay (package idemoutbox).
CREATE TABLE idem_outbox (
    id              text        PRIMARY KEY,       -- stable: derived from the key and a purpose
    client_id       text        NOT NULL,
    type            text        NOT NULL,
    destination     text        NOT NULL DEFAULT '',
    -- bytea, not jsonb: the payload is delivered byte for byte as enqueued.
    payload         bytea       NOT NULL,
    status          text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts        integer     NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    next_attempt_at timestamptz NOT NULL,
    delivered_at    timestamptz,
    last_error      text
);

-- The relay's poll: due pending events, oldest due first.
CREATE INDEX idem_outbox_due_idx ON idem_outbox (next_attempt_at) WHERE status = 'pending';
-- The purge of delivered events past retention.
CREATE INDEX idem_outbox_delivered_idx ON idem_outbox (delivered_at) WHERE status = 'delivered';
-- A client's events, newest first.
CREATE INDEX idem_outbox_client_idx ON idem_outbox (client_id, created_at DESC, id DESC);
