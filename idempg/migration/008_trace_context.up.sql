-- The W3C trace context (traceparent) of the request that claimed the key
-- last: of the request that ran it, for a completed key. A replay, a 409
-- and the resumer link their spans to it. A nullable column without a
-- default: adding it rewrites nothing, and instances that do not know it
-- keep working (their claims leave it NULL, or the previous holder's on a
-- takeover: a link to the trace of an earlier attempt of the request).
ALTER TABLE idempotency_keys ADD COLUMN trace_context text;
