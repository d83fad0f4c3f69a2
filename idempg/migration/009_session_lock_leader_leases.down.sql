DROP TABLE idem_leader_leases;
DROP FUNCTION idem_session_lock(bigint, text, text, timestamptz);
