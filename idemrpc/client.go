package idemrpc

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
)

// ClientOpts are the settings of the client interceptors.
type ClientOpts struct {
	// Methods are the full names of the methods that get a key. Defaults
	// to every method whose idempotency_level is neither NO_SIDE_EFFECTS
	// nor IDEMPOTENT, and methods missing from the protobuf registry.
	Methods []string
	// MaxAttempts is the most times the interceptor sends a call, with the
	// same key, while the server answers ABORTED or UNAVAILABLE with a
	// RetryInfo: it waits the RetryInfo's delay (at most MaxRetryDelay)
	// between attempts. 1 turns its retries off. gRPC's own retries and
	// hedges, below the interceptor, send the key of the attempt they
	// repeat. Defaults to MaxAttemptsDefault (3).
	MaxAttempts int
	// MaxRetryDelay caps the wait between two attempts. Defaults to
	// MaxRetryDelayDefault (30 s).
	MaxRetryDelay time.Duration
}

// Defaults of [ClientOpts].
const (
	MaxAttemptsDefault   = 3
	MaxRetryDelayDefault = 30 * time.Second
)

// WithDefaults returns o with its defaults, and an error for settings
// that are invalid.
func (o *ClientOpts) WithDefaults() (ClientOpts, error) {
	out := ClientOpts{}
	if o != nil {
		out = *o
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = MaxAttemptsDefault
	}
	if out.MaxRetryDelay == 0 {
		out.MaxRetryDelay = MaxRetryDelayDefault
	}
	if out.MaxAttempts < 1 || out.MaxRetryDelay < 0 {
		return ClientOpts{}, fmt.Errorf("idemrpc: ClientOpts.MaxAttempts must be 1 or more and MaxRetryDelay not negative")
	}
	return out, nil
}

// NeedsKey reports whether a call of the method gets a key, by o.Methods
// or the method's idempotency level.
func (o ClientOpts) NeedsKey(method string) bool {
	if o.Methods != nil {
		for _, m := range o.Methods {
			if m == method {
				return true
			}
		}
		return false
	}
	var s Server
	m, err := s.method(method)
	return err != nil || !m.exempt
}

type keyKey struct{}

// keySlot holds the key of a logical call, made at its first attempt.
type keySlot struct {
	mu  sync.Mutex
	key string
}

// WithCall returns a context for one logical call: every call made with
// it, or a context derived from it, sends the same key, made at the first.
// An application that retries a call on its own passes the same context
// to each attempt, and the server runs the call once. Use one per logical
// operation: a key sent to two methods, or with two requests, is refused.
func WithCall(ctx context.Context) context.Context {
	return context.WithValue(ctx, keyKey{}, &keySlot{})
}

// WithKey returns a context whose calls send key, one of the
// application's own (an order id, say), instead of one made by the
// interceptor.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyKey{}, &keySlot{key: key})
}

// KeyFor returns the key of a call made with ctx: the one of [WithKey] or
// [WithCall], or a new one.
func KeyFor(ctx context.Context) string {
	slot, ok := ctx.Value(keyKey{}).(*keySlot)
	if !ok {
		return NewKey()
	}
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.key == "" {
		slot.key = NewKey()
	}
	return slot.key
}

// NewKey returns a new random key: a version 4 UUID.
func NewKey() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// RetryDelay returns the delay of the RetryInfo of a status that a retry
// with the same key may change: ABORTED (the key is in flight) or
// UNAVAILABLE. It reports false for any other status, or one without
// RetryInfo.
func RetryDelay(st *spb.Status) (time.Duration, bool) {
	if c := code.Code(st.GetCode()); c != code.Code_ABORTED && c != code.Code_UNAVAILABLE {
		return 0, false
	}
	for _, a := range st.GetDetails() {
		var ri errdetails.RetryInfo
		if a.MessageIs(&ri) && a.UnmarshalTo(&ri) == nil {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// Wait waits d, at most limit, or until ctx ends: then it returns ctx's
// error.
func Wait(ctx context.Context, d, limit time.Duration) error {
	t := time.NewTimer(min(max(d, 0), limit))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
