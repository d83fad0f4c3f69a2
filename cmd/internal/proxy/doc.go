// Package proxy is idemproxy's reverse proxy: it gives any upstream HTTP API
// the Idempotency-Key contract of package idem, with no change to the
// upstream's code.
//
// Requests on key routes ([Route]) go through idem's middleware in
// two-phase mode, then to the upstream; every other request passes through.
// The client identity that scopes keys comes from an [Identity]:
// [CredentialIdentity] (an HMAC of the bearer token or Basic credentials) or
// [HeaderIdentity] (a header set by a trusted gateway).
//
// A forward that fails after the request was sent has an unknown outcome:
// the client gets [idem.ProblemOutcomeUnknown], and the route's [Policy] decides
// whether the key is released ([PolicyRetry]), held ([PolicyHold]), or kept
// unknown until a retry asks the upstream's status URL ([PolicyProbe]: the
// probe contract is [ProbeStatusHeader]'s). A
// forward that failed before anything was sent releases the key
// ([ProblemUpstreamUnavailable]). The forwarder never lets net/http re-send
// a request on its own. Responses stream to the client and are stored up to
// Config.MaxStoredBytes.
//
// docs/proxy.md is the user documentation.
package proxy
