DROP FUNCTION idem_session_lock(bigint, text, text, timestamptz);
