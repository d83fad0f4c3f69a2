// Package idemgin gives a Gin route group idem's whole Idempotency-Key
// contract: keys, fingerprints, replays, 409 and 422 answers, atomic and
// two-phase modes, phases and streaming, with Gin's own context.
//
//	m, err := idemgin.New(store, &idem.Config{})
//	v1 := router.Group("/v1", gin.BasicAuth(accounts), m.Handler())
//	v1.POST("/payments", createPayment)
//
// Keys are scoped by the client that the group's auth middleware put in
// the gin.Context: gin.BasicAuth's user (gin.AuthUserKey) unless
// idem.Config.ClientID says otherwise (see [ClientFromKey]). A handler
// finds the store's transaction, in ModeAtomic, in c.Request.Context(), as
// a net/http handler does (idemsqlite.TxFromContext, idempg.TxFromContext).
//
// Register the middleware last in the group, after auth: on a rerun after
// a transaction conflict it runs the route's handler (c.Handler()) again,
// which Gin lets it call; a route with more handlers after it is answered
// 503 on a rerun instead, which frees the key for the client's retry.
package idemgin
