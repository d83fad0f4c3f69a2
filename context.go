package idem

import (
	"context"
	"crypto/sha256"
	"encoding/base64"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/fingerprint"
)

type scopeKey struct{}

// ScopeFromContext returns the scope of the key that the middleware claimed
// for the request whose context this is.
func ScopeFromContext(ctx context.Context) (idemstore.Scope, bool) {
	s, ok := ctx.Value(scopeKey{}).(*idemstore.Scope)
	if !ok {
		return idemstore.Scope{}, false
	}
	return *s, true
}

// ContextWithScope returns a context that carries s, as the middleware does
// for its handler. Use it to test handlers that call [DeriveKey].
func ContextWithScope(ctx context.Context, s idemstore.Scope) context.Context {
	return contextWithScope(ctx, &s)
}

// contextWithScope returns a context that carries *s, which must not
// change: the middleware's, which does not copy the scope for it.
func contextWithScope(ctx context.Context, s *idemstore.Scope) context.Context {
	return context.WithValue(ctx, scopeKey{}, s)
}

// scopeContext is contextWithScope(Context, scope) as a type, which the
// middleware allocates together with what else a run of the handler needs;
// with phases set, it is contextWithPhaseHost of that too.
type scopeContext struct {
	context.Context
	scope  *idemstore.Scope // must not change
	phases *phaseHost       // nil: none
}

// Value returns the scope and the phases' host for their keys, and asks
// the parent for any other. It switches on the key's type: a key of these
// empty types is always equal to their zero value, and comparing types
// costs less than comparing interfaces, for the many lookups of other keys
// (the database driver's, net/http's) that pass through here.
func (c *scopeContext) Value(key any) any {
	switch key.(type) {
	case scopeKey:
		return c.scope
	case phaseHostKey:
		if c.phases != nil {
			return c.phases
		}
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
// In a phase of [Phases] that runs from a recovery point after the first,
// it is also unique per claim of the client's key: derived from the
// client, the key, the creation of the key's row and the purpose. The row
// and its creation stay from the first recovery point until retention,
// through every release, takeover and [Resumer] run, so each of them
// derives the first holder's key; a client's key reused after its
// retention, or after a purge, makes a new row, a new operation, and
// derives a new key, which the other system has not seen. The first
// phase's recovery point saves the row's creation ([idemstore.LeaseInfo.CreatedAt])
// with the state, under the name "idem.claim_created".
//
// Everywhere else it is derived from the client, the key and the purpose
// alone: in [ModeAtomic], in a two-phase handler that runs no phases, and in
// the first phase. There a claim's row does not outlive a failure (a
// rollback, or a release that deletes a key which passed no recovery
// point), and the client's retry makes a new one: it must derive the key
// of the attempt it repeats, which may have reached the other system. The
// cost is that a key reused after its retention derives the first
// request's key again, which the other system may still remember (it would
// answer with the first request's result, or refuse the new parameters):
// make the call in a later phase, or put the id of what the request
// creates into the purpose ("charge:" + the payment's id), made and saved
// by the first phase, as paymentsd does.
//
// Upgrades: operations whose first recovery point an earlier version saved
// carry no "idem.claim_created", and their later phases derive as they did
// then (client, key and purpose), so a resumed operation repeats its calls
// with the keys it used. Do not go back to such a version while operations
// that this one started are unfinished: it would derive their keys anew.
func DeriveKey(ctx context.Context, purpose string) string {
	s, ok := ScopeFromContext(ctx)
	if !ok {
		return ""
	}
	parts := []string{"idem-derive-v1", s.ClientID, s.Key, purpose}
	if created, ok := ctx.Value(claimCreatedKey{}).(string); ok {
		parts = []string{"idem-derive-v2", s.ClientID, s.Key, created, purpose}
	}
	h := sha256.New()
	for _, part := range parts {
		fingerprint.WritePart(h, []byte(part))
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return "idk_" + base64.RawURLEncoding.EncodeToString(sum[:24])
}

// claimCreatedKey carries, in the context of a phase that runs after the
// operation's first recovery point, the creation of the key's row as the
// first recovery point saved it: see [DeriveKey].
type claimCreatedKey struct{}
