// Package idemsqlite is an idemstore.Store in an embedded SQLite database, in
// pure Go (no cgo), for services that want idempotency with zero set-up.
//
// The key table lives in the application's own database file, so a handler's
// business writes and the stored response share one transaction: take it
// with [TxFromContext]. The schema is applied by [Store.Migrate] from
// embedded, versioned SQL files.
//
//	store, err := idemsqlite.Open("payments.db", nil)
//	...
//	if err := store.Migrate(ctx); err != nil { ... }
//	mw, err := idem.New(store, &idem.Config{ClientID: clientOf})
//	mux.Handle("POST /v1/payments", mw.Wrap(createPayment))
//
// SQLite allows one writer at a time. The store keeps a single write
// connection, so writers queue in the process rather than failing with
// SQLITE_BUSY, and answers a duplicate of a key in flight from memory at
// once with a 409. Several processes may share a file; they wait for each
// other's write lock up to [Config.BusyTimeout].
//
// The two modes hold a key differently, each by a lease type of its own
// (lease_atomic.go, lease_twophase.go). In idem.ModeAtomic the claim's
// transaction stays open on the write connection until Complete or
// Release: the key's row, the handler's writes and the response commit
// together, and a Release or a crash leaves nothing. In idem.ModeTwoPhase
// the claim commits the key's row at once with a fencing token, the
// handler's transaction begins on its first [TxFromContext], and Complete
// stores the response only while the token still holds the key. Only
// two-phase leases keep recovery points (idemstore.RecoveryLease), which
// idem.Phases and the resumer need.
//
// A commit is a call into the library in this process, not a message over
// a network, so its outcome is always known: Complete never returns
// idemstore.ErrOutcomeUnknown. When COMMIT fails, SQLite has rolled the
// transaction back, and Complete's error means that nothing was committed.
//
// The store is also an idemoutbox.Store: idemoutbox.Enqueue writes an event
// in the lease's transaction, and an idemoutbox.Relay delivers it after the
// commit, one batch at a time per store. Run one relay per database file.
// It also keeps webhook watermarks in the lease's transaction
// ([Store.AdvanceWatermark], for idemwebhook.Newest).
package idemsqlite
