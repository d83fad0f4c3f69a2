-- The newest event applied to each object, per webhook endpoint (package
-- idemwebhook): a receiver skips an event older than its object's
-- watermark. Written in the handler's transaction, with its business
-- writes. Events of one time are ordered by their ids.
CREATE TABLE idem_webhook_watermarks (
    endpoint   text        NOT NULL,
    object     text        NOT NULL,
    event_time timestamptz NOT NULL,
    event_id   text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (endpoint, object)
);
