package idemoutbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemstore"
)

// recorder is an Enqueuer that keeps what it is given; Enqueue's own
// checks run before any store is involved.
type recorder struct{ events []idemoutbox.Event }

func (r *recorder) EnqueueEvent(_ context.Context, e idemoutbox.Event) error {
	r.events = append(r.events, e)
	return nil
}

func TestEnqueueChecksItsInput(t *testing.T) {
	t.Parallel()
	ctx := idem.ContextWithScope(context.Background(), idemstore.Scope{ClientID: "alice", Key: "k1"})
	ok := idemoutbox.EventParams{Purpose: "p", Type: "t", Payload: json.RawMessage(`{}`)}
	tests := []struct {
		name string
		ctx  context.Context
		mod  func(*idemoutbox.EventParams)
		want error
	}{
		{"NoScope", context.Background(), nil, idemoutbox.ErrNoScope},
		{"NoPurpose", ctx, func(p *idemoutbox.EventParams) { p.Purpose = "" }, idemoutbox.ErrInvalidEvent},
		{"NoType", ctx, func(p *idemoutbox.EventParams) { p.Type = "" }, idemoutbox.ErrInvalidEvent},
		{"PayloadNotJSON", ctx, func(p *idemoutbox.EventParams) { p.Payload = json.RawMessage(`{`) }, idemoutbox.ErrInvalidEvent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := ok
			if tt.mod != nil {
				tt.mod(&p)
			}
			r := &recorder{}
			if _, err := idemoutbox.Enqueue(tt.ctx, r, p); !errors.Is(err, tt.want) || len(r.events) != 0 {
				t.Fatalf("Enqueue = %v with %d events written, want %v and none", err, len(r.events), tt.want)
			}
		})
	}
}

func TestEventID(t *testing.T) {
	t.Parallel()
	scope := idemstore.Scope{ClientID: "alice", Key: "k1"}
	ctx := idem.ContextWithScope(context.Background(), scope)
	id := idemoutbox.EventID(ctx, "payment.succeeded")
	if !strings.HasPrefix(id, "evt_") || id != idemoutbox.EventID(ctx, "payment.succeeded") {
		t.Fatalf("EventID = %q; want a stable evt_ id", id)
	}
	others := []string{
		idemoutbox.EventID(ctx, "payment.declined"),
		idemoutbox.EventID(idem.ContextWithScope(context.Background(), idemstore.Scope{ClientID: "bob", Key: "k1"}), "payment.succeeded"),
		idemoutbox.EventID(idem.ContextWithScope(context.Background(), idemstore.Scope{ClientID: "alice", Key: "k2"}), "payment.succeeded"),
		"evt_" + strings.TrimPrefix(idem.DeriveKey(ctx, "payment.succeeded"), "idk_"),
	}
	for _, o := range others {
		if o == id {
			t.Fatalf("EventID collides with %q", o)
		}
	}
	if strings.Contains(id, scope.Key) {
		t.Fatal("EventID reveals the idempotency key")
	}
	if idemoutbox.EventID(context.Background(), "p") != "" {
		t.Fatal("EventID without a key is not empty")
	}
}
