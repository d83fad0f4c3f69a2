package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemstore"
)

func TestOutboxStatsAndRetryDead(t *testing.T) {
	t.Parallel()
	for kind, db := range databases(t) {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			if code, _, errOut := runIdem(t, "migrate", "--db", db); code != exitOK {
				t.Fatalf("migrate: %s", errOut)
			}
			store, err := openStore(ctx, db, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			for _, key := range []string{"k1", "k2"} {
				scope := idemstore.Scope{ClientID: "alice", Key: key}
				res, err := store.Store().Claim(ctx, idemstore.ClaimParams{
					Scope: scope, Method: "POST", Path: "/v1/payments", RequestHash: make([]byte, 32),
					Now: time.Now(), LockTimeout: time.Second, Retention: time.Hour,
				})
				if err != nil || res.Lease == nil {
					t.Fatalf("claim: %v", err)
				}
				lctx := idem.ContextWithScope(res.Lease.Context(ctx), scope)
				if _, err := idemoutbox.Enqueue(lctx, store.Outbox(), idemoutbox.EventParams{Purpose: "p", Type: "t", Payload: []byte(`{}`)}); err != nil {
					t.Fatal(err)
				}
				if err := res.Lease.Complete(ctx, &idemstore.Response{StatusCode: 201}); err != nil {
					t.Fatal(err)
				}
			}
			// One attempt allowed, and the receiver fails: both are dead.
			receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) }))
			defer receiver.Close()
			wh, err := idemoutbox.NewWebhook(&idemoutbox.WebhookConfig{URL: receiver.URL, Secret: idemoutbox.NewSecret()})
			if err != nil {
				t.Fatal(err)
			}
			relay, err := idemoutbox.NewRelay(store.Outbox(), wh, &idemoutbox.RelayConfig{MaxAttempts: 1, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			if n, err := relay.DeliverOnce(ctx); n != 2 || err != nil {
				t.Fatalf("DeliverOnce = %d, %v", n, err)
			}
			steps := []struct {
				args []string
				want string
			}{
				{[]string{"outbox", "stats", "--db", db}, "pending 0\noldest_pending_age -\ndead 2"},
				{[]string{"outbox", "retry-dead", "--db", db, "evt_unknown"}, "0 dead events are pending again"},
				{[]string{"outbox", "retry-dead", "--db", db}, "2 dead events are pending again"},
				// The age is that of the oldest event, whatever it is now.
				{[]string{"outbox", "stats", "--db", db}, `pending 2\noldest_pending_age \d+s\ndead 0`},
			}
			for _, step := range steps {
				code, out, errOut := runIdem(t, step.args...)
				if code != exitOK || !regexp.MustCompile(`^`+step.want+`$`).MatchString(strings.TrimSpace(out)) {
					t.Fatalf("idem %s: exit %d, %q (stderr %q); want %q", strings.Join(step.args, " "), code, out, errOut, step.want)
				}
			}
		})
	}
}

func TestOutboxUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"outbox"},
		{"outbox", "drain"},
		{"outbox", "stats"},
		{"outbox", "stats", "--db", "sqlite:x.db", "extra"},
	} {
		if code, _, _ := runIdem(t, args...); code != exitUsage {
			t.Errorf("idem %s: exit %d, want %d", strings.Join(args, " "), code, exitUsage)
		}
	}
	if code, out, _ := runIdem(t, "outbox", "-h"); code != exitOK || !strings.Contains(out, "retry-dead") {
		t.Errorf("idem outbox -h: exit %d, %q", code, out)
	}
}
