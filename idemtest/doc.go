// Package idemtest helps test idem stores and the handlers behind idem.
//
// [MemoryStore] is a complete in-memory [idemstore.Store] for tests and examples.
// [RunStoreTests] is the conformance suite every store must pass: claims,
// replays, mismatches, concurrent claims electing exactly one owner,
// release, expiry, takeover after the lock timeout, fencing of stale
// holders, tenant isolation, that a key in flight is reported without
// waiting for its holder, that an ended lease answers [idemstore.ErrLeaseEnded]
// and, for transactional stores, that business writes commit and roll back
// with the key, and, for stores whose two-phase leases keep recovery points
// ([idemstore.RecoveryLease]), that a retry or a takeover resumes at the last
// committed recovery point and that a stale holder is fenced out of a
// phase's commit. Stores with a Purge method get the purge tests, and stores
// with a versioned schema (see [Harness].NewUnmigrated) the schema tests.
// [RunAdminTests] checks a store's [idemstore.KeyAdmin]: listing, reading, the
// fenced release of stuck keys and the deletion of completed ones.
// [RunOutboxTests] checks a store's outbox (idemoutbox.Store): events
// commit and roll back with the lease, reruns enqueue once, and a relay
// delivers with retries, dead events, concurrent relays and restarts.
// MemoryStore has an outbox too, so handlers that enqueue events can be
// tested on it. [RunWatermarkTests] checks a store's webhook watermarks
// (idemwebhook.Watermarks) through an idemwebhook receiver: events of an
// object applied only when newest, rolled back with a failed handler, and
// ordered across concurrent deliveries.
package idemtest
