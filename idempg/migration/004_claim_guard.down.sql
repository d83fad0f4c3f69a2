DROP FUNCTION idem_claim_guard(bigint, text, text, timestamptz);
