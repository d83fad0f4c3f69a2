-- The W3C trace context (traceparent) of the request that claimed the key
-- last: of the request that ran it, for a completed key. A replay, a 409
-- and the resumer link their spans to it. NULL when the claim carried
-- none, or was made by an instance that does not know the column.
ALTER TABLE idempotency_keys ADD COLUMN trace_context VARBINARY(512) NULL;
