-- The newest event applied to each object, per webhook endpoint (package
-- idemwebhook): a receiver skips an event older than its object's
-- watermark. Written in the handler's transaction, with its business
-- writes. Events of one time are ordered by their ids. Times are Unix
-- microseconds (UTC).
CREATE TABLE idem_webhook_watermarks (
    endpoint   TEXT    NOT NULL,
    object     TEXT    NOT NULL,
    event_time INTEGER NOT NULL,
    event_id   TEXT    NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (endpoint, object)
) WITHOUT ROWID;
