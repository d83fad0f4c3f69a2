DROP FUNCTION idem_lease_held(bigint);
DROP TABLE idempotency_keys;
