// Package idemclient is a retrying HTTP client for APIs that accept an
// Idempotency-Key header (draft-ietf-httpapi-idempotency-key-header, with
// Stripe's semantics).
//
// A POST that times out leaves the caller unable to tell whether the server
// acted. idemclient makes such a request safe to repeat: it gives every POST
// and PATCH an Idempotency-Key once, for the whole logical operation, and
// retries the same request with the same key and the byte-identical body
// until the server answers with an outcome, the attempts run out, or the
// caller's context ends. It never mints a new key for a retry, so a server
// that follows the draft executes the operation at most once and replays the
// stored outcome to the later attempts.
//
// # Keys
//
// A key is chosen once per request passed to [Client.Do] or to the
// RoundTripper returned by [Client.Transport]:
//
//   - an Idempotency-Key header already on the request is sent as it is;
//   - otherwise a key attached with [WithKey] to the request's context;
//   - otherwise a new random key from [NewKey] (130 bits from crypto/rand).
//
// Keys that idemclient formats are sent as an RFC 9651 sf-string, as the
// draft requires (Idempotency-Key: "…"); set [Config.BareKey] for servers
// that want the unquoted form (letters, digits and "_-.:~/+=" only; any
// other key is refused with [ErrInvalidKey]). A caller that must survive its own restart
// stores a key from [NewKey] before the first attempt and passes it with
// [WithKey] when it tries again later.
//
// GET, HEAD, OPTIONS, PUT, DELETE, TRACE and every other method are
// idempotent or unknown: they are sent once, unchanged, without a key.
//
// # When it retries
//
// [DefaultRetryPolicy] retries connection errors and per-attempt timeouts,
// 5xx responses except 501, 409 (the first attempt is still running) and 429.
// It never retries 422 or any other 4xx status. The wait before a retry is
// [DefaultBackoff], exponential with full jitter: a random duration in
// [0, min(MaxDelay, BaseDelay·2ⁿ)] before the (n+1)th retry. A Retry-After
// header, in delta-seconds or HTTP-date form, replaces the computed wait.
// No wait is started that would end after [Config.MaxElapsed] or after the
// caller's context deadline: idemclient returns the last response or error
// instead. Cancelling the caller's context stops at once, also during a wait.
//
// # Outcomes
//
// [Client.Do] returns the first response the policy does not retry, or the
// last response when it runs out of attempts or time. A 422 to a keyed request
// becomes a [*KeyReusedError] (errors.Is(err, [ErrKeyReused])): the server
// says the key was used before for a different request, a bug in the caller.
// An operation that ends without any response returns a [*RetryError] that
// carries the key, so the caller can try again later with that same key.
// [Replayed] tells whether the server replayed a stored response, and
// [Attempts] how many attempts idemclient made.
//
// The request body is replayed from req.GetBody when it is set (as
// http.NewRequest sets it for bytes, strings and bytes.Buffer bodies), or
// else buffered once in memory, up to [Config.MaxBodyBytes].
//
// The package depends on the standard library only and works with any API
// that follows the draft, not only with idem servers.
package idemclient
