package idem

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
)

type scopeKey struct{}

// ScopeFromContext returns the scope of the key that the middleware claimed
// for the request whose context this is.
func ScopeFromContext(ctx context.Context) (Scope, bool) {
	s, ok := ctx.Value(scopeKey{}).(*Scope)
	if !ok {
		return Scope{}, false
	}
	return *s, true
}

// ContextWithScope returns a context that carries s, as the middleware does
// for its handler. Use it to test handlers that call [DeriveKey].
func ContextWithScope(ctx context.Context, s Scope) context.Context {
	return contextWithScope(ctx, &s)
}

// contextWithScope returns a context that carries *s, which must not
// change: the middleware's, which does not copy the scope for it.
func contextWithScope(ctx context.Context, s *Scope) context.Context {
	return context.WithValue(ctx, scopeKey{}, s)
}

// scopeContext is contextWithScope(Context, scope) as a type, which the
// middleware allocates together with what else a run of the handler needs.
type scopeContext struct {
	context.Context
	scope *Scope // must not change
}

func (c *scopeContext) Value(key any) any {
	if key == (scopeKey{}) {
		return c.scope
	}
	return c.Context.Value(key)
}

// DeriveKey returns an idempotency key for a call to another system, such as
// a card processor, made while handling the request whose context this is.
//
// The derived key is the same for the same client, key and purpose on every
// retry and in every process, so a retried or taken-over handler repeats the
// downstream call with the same key and the other system does the work once.
// It differs for different purposes ("charge", "refund"), and it is a one-way
// digest: it does not reveal the client's key. It returns "" when the context
// carries no key.
//
// A client's key reused after its retention is a new request, but it
// derives the same key, which the other system may still remember: it
// would answer with the first request's result, or refuse the new
// parameters. Where reuse cannot be ruled out, put the id of what the
// request creates into the purpose ("charge:" + the payment's id), made
// before the call and committed with a recovery point, so that a rerun
// repeats the call with the same key and a reuse makes a new one, as
// paymentsd does.
func DeriveKey(ctx context.Context, purpose string) string {
	s, ok := ScopeFromContext(ctx)
	if !ok {
		return ""
	}
	h := sha256.New()
	for _, part := range []string{"idem-derive-v1", s.ClientID, s.Key, purpose} {
		writePart(h, []byte(part))
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return "idk_" + base64.RawURLEncoding.EncodeToString(sum[:24])
}
