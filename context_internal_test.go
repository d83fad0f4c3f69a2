package idem

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem/idemstore"
)

// TestScopeContext checks that scopeContext is context.WithValue for the
// scope: it carries the scope and its parent's values, and ends with its
// parent, as do contexts derived from it.
func TestScopeContext(t *testing.T) {
	t.Parallel()
	type otherKey struct{}
	scope := idemstore.Scope{ClientID: "client-1", Key: "key-1"}
	boom := errors.New("boom")
	parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), otherKey{}, "v"))
	ctx := &scopeContext{Context: parent, scope: &scope}
	child, stop := context.WithCancel(context.WithValue(ctx, otherKey{}, "w"))
	defer stop()
	inner := ContextWithScope(ctx, idemstore.Scope{ClientID: "client-2"})

	if got, ok := ScopeFromContext(ctx); !ok || got != scope {
		t.Errorf("ScopeFromContext = %+v, %t; want %+v", got, ok, scope)
	}
	if got, ok := ScopeFromContext(child); !ok || got != scope {
		t.Errorf("ScopeFromContext of a derived context = %+v, %t; want %+v", got, ok, scope)
	}
	if got, _ := ScopeFromContext(inner); got.ClientID != "client-2" {
		t.Errorf("ScopeFromContext of an inner scope = %+v, want client-2's", got)
	}
	if v := ctx.Value(otherKey{}); v != "v" {
		t.Errorf("Value(otherKey) = %v, want the parent's v", v)
	}
	if ctx.Err() != nil || child.Err() != nil {
		t.Fatalf("Err = %v, %v before the parent ended", ctx.Err(), child.Err())
	}
	cancel(boom)
	<-child.Done()
	if !errors.Is(child.Err(), context.Canceled) || context.Cause(child) != boom || context.Cause(ctx) != boom {
		t.Errorf("after the parent ended: Err %v, Cause %v and %v; want Canceled and boom", child.Err(), context.Cause(child), context.Cause(ctx))
	}
}
