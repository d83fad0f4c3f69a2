DROP TRIGGER idempotency_keys_reset_lease_expiry ON idempotency_keys;
DROP FUNCTION idem_reset_lease_expiry();
ALTER TABLE idempotency_keys DROP COLUMN lease_expires_at;
