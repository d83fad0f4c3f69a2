-- The completer's listing, on a predicate that a completion does not
-- change: started keys that passed a recovery point are the keys with a
-- recovery point, since a completion now clears it (queryCompleteKey).
--
-- PostgreSQL makes an update HOT (heap-only: no new index entries, the old
-- version pruned from its page without vacuum) only when no column that an
-- index names changes, in its key or its predicate. The predicate of
-- migration 003's index names status, which every completion changes, so no
-- two-phase completion was ever HOT: each left a second entry in the
-- primary key and in the created_at index until vacuum. A completion of a
-- key that passed no recovery point now changes no indexed column (its
-- recovery_point stays NULL); measured, 93 % of two-phase completions are
-- HOT on a table at the default fillfactor (the rest found their page
-- full), none before.
--
-- On a large table, create the index with CREATE INDEX CONCURRENTLY (the
-- same definition) before migrating; the migration then finds it.
CREATE INDEX IF NOT EXISTS idempotency_keys_recovery_idx ON idempotency_keys (created_at)
    WHERE recovery_point IS NOT NULL;
DROP INDEX IF EXISTS idempotency_keys_unfinished_idx;

-- Keys that completed before this migration keep their last recovery
-- point; they are in the new index until the purge deletes them, and the
-- listing, which also asks for status = 'started', passes over them.
