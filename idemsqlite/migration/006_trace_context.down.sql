ALTER TABLE idempotency_keys DROP COLUMN trace_context;
