// Package idemecho gives an Echo group idem's whole Idempotency-Key
// contract: keys, fingerprints, replays, 409 and 422 answers, atomic and
// two-phase modes, phases and streaming, with Echo's own context and error
// handling.
//
//	m, err := idemecho.New(store, &idem.Config{})
//	v1 := e.Group("/v1", auth, m.Handler())
//	v1.POST("/payments", createPayment)
//
// Keys are scoped by the client that the group's auth middleware put in
// the echo.Context, under "user" unless idem.Config.ClientID says
// otherwise (see [ClientFromKey]). An error that a handler returns is
// rendered by the Echo's HTTPErrorHandler inside the key's run, so that
// its answer is the one stored (or, for a 5xx, the key is released). A
// handler finds the store's transaction, in ModeAtomic, in
// c.Request().Context() (idemsqlite.TxFromContext, idempg.TxFromContext).
package idemecho
